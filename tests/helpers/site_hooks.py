"""Trial environments with a `sitecustomize` of a test's own: Python runs it at the start of every
process of that environment (zygotes, trial processes, compile workers), as a site hook of a
user's installation would. Each hook below tells a zygote (`--zygote` on its command line) from
the other processes where it matters."""
from __future__ import annotations

import os
from pathlib import Path

PRINTS_A_BLANK_LINE = "print(flush=True)\n"         # a stray line on stdout, in every process
STUCK_ZYGOTE = "import sys, time\nif '--zygote' in sys.argv:\n    time.sleep(3600)\n"
# A zygote whose imports fail: a module it imports (workers/trial_process.SPARE_IMPORTS) cannot be imported.
FAILING_ZYGOTE = "import sys\nif '--zygote' in sys.argv:\n    sys.modules['torch._inductor.compile_fx'] = None\n"


def hooked_env(folder: Path, hook: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (None: this process's environment) with `hook` as the sitecustomize of every process."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(hook)
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH")) if p)
    return env
