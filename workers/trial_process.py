"""Entry point of a spawned trial process: `python -m tuner.workers.trial_process JOB RESULT`.

Reads the job JSON, runs it, writes the result JSON. Only `run_trial` and
`run_confirmation` run here; neither touches the database.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(job_path: str, result_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    if job["kind"] == "trial":
        from tuner.measure import run_trial
        from tuner.trial import TrialRequest
        result = run_trial(TrialRequest.from_json(job["request"])).to_json()
    elif job["kind"] == "confirm":
        from tuner.confirm import ConfirmRequest, run_confirmation
        result = run_confirmation(ConfirmRequest.from_json(job["request"])).to_json()
    else:
        raise SystemExit(f"unknown job kind {job['kind']!r}")
    tmp = Path(result_path + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(result_path)   # the driver never reads a half-written result
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
