"""A report page opened in Debian's headless Chromium, offline, with its screenshot kept."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO

ARTIFACTS = REPO / "test-artifacts"


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def browse(page: Path, screenshot: Path, *, images: int = 3) -> None:
    """Open `page` in headless Chromium: no SEVERE console entry, `images` images, each complete
    with a width, nothing fetched but the file and data URIs; keep a full-page screenshot."""
    driver = chromium()
    try:
        driver.get(page.as_uri())
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1200, min(int(height) + 40, 8000))
        shown = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])")
        fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(screenshot))
    finally:
        driver.quit()
    assert severe == []
    assert len(shown) == images and all(complete and width > 0 for complete, width, _ in shown), shown
    assert all(name.startswith(("data:", "file:")) for name in fetched), fetched


def chromium():
    """A Selenium driver for Debian's headless Chromium, started from its known paths, so
    Selenium Manager (which would download a driver) never runs. Fails, never skips, without them."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: run scripts/test.sh, which installs chromium and "
                    "chromium-driver", pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    # a proxy that refuses everything: a page that fetched anything from the network would log an error
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--proxy-server=127.0.0.1:9"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)

