"""A stored verdict's runtime knobs where the user runs: `backend="tuner"` sets what a running process
can still set and names the rest once; `tuner run` starts a program with all of them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.stored import TINY, store_configs, tiny_workload
from tuner.runtime import allocators

# A fresh process that compiles the tiny model with backend="tuner" and runs it, then allocates 4 MiB
# and says whether glibc served it with mmap (its starting threshold) or from the heap (glibc-retain).
_PROGRAM = textwrap.dedent("""
    import ctypes, json, logging, sys
    import torch
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    sys.path.insert(0, sys.argv[1])
    import tiny_mlp
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                   "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    torch.manual_seed(0)
    model = torch.compile(tiny_mlp.get_model(), backend="tuner")
    with torch.no_grad():       # as the stored workload was captured
        model(*tiny_mlp.get_inputs())
        model(*tiny_mlp.get_inputs())
    mapped = libc.mallinfo2().hblks
    block = torch.empty(4 << 20, dtype=torch.uint8)
    print(json.dumps({"mmapped": libc.mallinfo2().hblks - mapped}))
""")


def _run(url: str, env: dict[str, str] | None = None, argv: list[str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "OMP_WAIT", "TUNER_"))}
    cmd = argv or [sys.executable, "-c", _PROGRAM, str(TINY.parent)]
    # From a folder of its own: in the checkout, `python -c` would import the source tuner/ over the installed one.
    return subprocess.run(cmd, capture_output=True, text=True, env={**base, "TUNER_DB": url, **(env or {})},
                          timeout=300, cwd=Path(url.removeprefix("sqlite:///")).parent)


@pytest.fixture
def stored(tmp_path: Path):
    from tuner.platform import current_platform

    def store(runtime: dict[str, str]) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        url = f"sqlite:///{folder / 'tuner.db'}"
        store_configs(url, tiny_workload(), current_platform("cpu"), {"max_fusion_size": 8}, runtime=runtime)
        return url
    return store


@pytest.mark.skipif(allocators.glibc() is None, reason="glibc's malloc only")
def test_the_backend_sets_glibcs_parameters_a_running_process_can_still_set(stored) -> None:
    plain = _run(stored({}))
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout.splitlines()[-1]) == {"mmapped": 1}      # glibc as it starts
    retain = _run(stored({"runtime.allocator": "glibc-retain"}))
    assert retain.returncode == 0, retain.stderr
    assert json.loads(retain.stdout.splitlines()[-1]) == {"mmapped": 0}     # kept on the heap: set at compile
    assert "not in effect" not in retain.stderr


def test_what_a_running_process_cannot_set_is_named_once_with_the_fix(stored) -> None:
    url = stored({"runtime.omp_wait_policy": "passive"})
    missing = _run(url)
    assert missing.returncode == 0, missing.stderr
    lines = [ln for ln in missing.stderr.splitlines() if "runtime.omp_wait_policy=passive" in ln]
    assert len(lines) == 1 and "OMP_WAIT_POLICY=PASSIVE must be set when the process starts" in lines[0]
    assert "tuner run" in lines[0]
    started = _run(url, env={"OMP_WAIT_POLICY": "PASSIVE"})
    assert started.returncode == 0 and "not in effect" not in started.stderr


def test_tuner_run_starts_the_program_with_the_stored_runtime_knobs(stored, tmp_path: Path) -> None:
    if not allocators.available("jemalloc"):
        pytest.skip("libjemalloc2 is not installed (scripts/test.sh installs it)")
    url = stored({"runtime.allocator": "jemalloc", "runtime.omp_wait_policy": "passive"})
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        maps = open("/proc/self/maps").read()
        print(json.dumps({"argv": sys.argv[1:], "wait": os.environ.get("OMP_WAIT_POLICY"),
                          "jemalloc": "libjemalloc" in maps}))
    """))
    tuner = str(Path(sys.executable).with_name("tuner"))
    done = _run(url, argv=[tuner, "run", "--model", str(TINY), str(script), "--port", "80"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"argv": ["--port", "80"], "wait": "PASSIVE", "jemalloc": True}
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("tuner run:")]
    assert "runtime.allocator=jemalloc" in line and str(allocators.library("jemalloc")) in line


def test_tuner_run_with_nothing_stored_starts_the_program_as_it_is(tmp_path: Path) -> None:
    from tuner.storage import upgrade

    script = tmp_path / "serve.py"
    script.write_text("print('ran')\n")
    tuner = str(Path(sys.executable).with_name("tuner"))
    upgrade(empty := f"sqlite:///{tmp_path / 'empty.db'}")
    for url, said in ((empty, "nothing stored for"), (f"sqlite:///{tmp_path / 'missing.db'}", "does not exist")):
        done = _run(url, argv=[tuner, "run", "--model", str(TINY), str(script)])
        assert done.returncode == 0 and done.stdout.strip() == "ran", done.stderr
        assert said in done.stderr and "as it is" in done.stderr
