"""What a config is verified against (`tuner.measure.references`), and what holding it costs: the
eager and float64 references are taken once per process, while the device's compile lock is held
(issue 33, defect 3), and a confirmation that runs out of memory holding every finalist of a large
model confirms the best ranked of them instead of recording the one it hit as crashed (defect 1).
Real compiles of tiny models; the only stand-in is the GPU's memory (tests/models/crowded_mlp.py)."""
from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import MODELS
from tuner.measure import Runner, prepare, run_confirmation
from tuner.measure.node_lock import measure_lock
from tuner.search.confirmation_retries import confirm_through
from tuner.search.verdict import request
from tuner.trial import DEFAULT, EAGER, Candidate, MeasureSpec, Status


@pytest.fixture(autouse=True)
def own_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Lock files under this test's folder, never the machine's shared ones."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def clocked(folder: Path) -> MeasureSpec:
    """A copy of clocked_mlp.py of this test's own (so no other test's references are reused)."""
    path = folder / "clocked_mlp.py"
    path.write_text((MODELS / "clocked_mlp.py").read_text())
    sys.__dict__.pop("_clocked_mlp", None)
    return MeasureSpec(str(path))


def test_a_trial_loads_its_model_and_takes_its_references_only_after_a_timed_section(tmp_path: Path) -> None:
    """With --workers 2 on one device, one trial's load and eager runs overlapped the other's timed
    section; they now wait for it, as a compile does. Stood in by a thread holding the timed
    section's lock (flock locks belong to each open file, so a thread excludes as a process does)."""
    spec = clocked(tmp_path)
    held, release, released_at = threading.Event(), threading.Event(), []

    def timed_section() -> None:
        with measure_lock():
            held.set()
            release.wait(60)
            released_at.append(time.monotonic())

    holder = threading.Thread(target=timed_section, daemon=True)
    holder.start()
    assert held.wait(10)
    threading.Timer(1.0, release.set).start()
    runner = prepare(spec, None)
    holder.join(10)
    assert isinstance(runner, Runner), runner
    events = sys._clocked_mlp
    assert [what for what, _, _ in events[:3]] == ["get_model", "eager call", "eager call"], events
    assert all(at >= released_at[0] for _, _, at in events), (events, released_at)


def test_the_float64_reference_is_taken_once_per_process(tmp_path: Path) -> None:
    """Each variant used to take its own, with a float64 copy of the model beside every variant
    already resident: 4-5x a bf16 model on top of a confirmation's copies. It is now taken at the
    first prepare, beside one model only, and kept on the host."""
    spec = clocked(tmp_path)
    for params in (None, None):
        assert isinstance(prepare(spec, params), Runner)
    float64 = [event for event in sys._clocked_mlp if event[1] is not None and "float64" in str(event[1])]
    assert len(float64) == 1, sys._clocked_mlp


def test_a_confirmation_that_cannot_hold_every_finalist_confirms_the_best_ranked() -> None:
    """crowded_mlp.py has room for 3 copies. The selection run holds 4 (eager, the default, two
    finalists), so its 4th variant ran out of memory and was recorded as crashed, whichever it was
    in the run's shuffled compile order (the default: no confirmation at all). Now the run is
    known to be crowded, the rerun leaves out the lowest-ranked finalist (not confirmed, and why),
    and nothing is recorded as crashed."""
    spec = MeasureSpec(str(MODELS / "crowded_mlp.py"), repeat=3, timeout_s=600)
    req = request(spec, [(EAGER, None), (DEFAULT, Candidate()),
                         ("tuned #1", Candidate.from_dict({"max_fusion_size": 32})),
                         ("tuned #2", Candidate.from_dict({"max_fusion_size": 16}))], 2, stage="selection")
    runs: list[tuple[str, ...]] = []

    def each_run(r):
        runs.append(tuple(label for label, _ in r.variants))
        return run_confirmation(r)

    result = confirm_through(each_run, req)
    assert runs == [(EAGER, DEFAULT, "tuned #1", "tuned #2"), (EAGER, DEFAULT, "tuned #1")]
    for label in (EAGER, DEFAULT, "tuned #1"):
        # 2 rounds, or as many as a later look of the sequential test took (ConfirmRequest.looks)
        assert result.get(label).status is Status.OK and len(result.get(label).round_ms) in (2, 4, 8), result.get(label)
    left_out = result.get("tuned #2")
    assert left_out.status is Status.CANCELLED and left_out.round_ms == ()
    assert left_out.error.startswith("not confirmed: the confirmation ran out of memory holding 4 variants at "
                                     "once (out of memory: "), left_out.error
