"""A confirmation whose finalist crashes records that variant as crashed and finishes with the
others in a fresh process; it never aborts (issue 24, item 3).

Real processes, real compiles: tests/models/knob_crash_mlp.py kills the confirmation process
(SIGABRT) while Inductor compiles it with `max_fusion_size=8`, makes that compile fail, or makes
its calls raise or segfault once the rounds time them. A compile that fails ends the run too:
what it leaves behind (a poisoned CUDA context) must not touch the others. The finalist with that knob passed no trial here: the test
hands `conclude` the finalists a search would have, and it confirms through the search's own
`_confirm` on a real LocalExecutor.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import MODELS
from tuner.search.confirmation_retries import confirm_through
from tuner.search.pipeline import _confirm
from tuner.search.verdict import Finalist, conclude, request
from tuner.trial import DEFAULT, EAGER, Candidate, ConfirmFailed, ConfirmResult, MeasureSpec, Status, VariantResult
from tuner.workers.local import LocalExecutor

KNOB_CRASH = MODELS / "knob_crash_mlp.py"
ROUNDS = 12
FINALISTS = (Finalist("tuned #1", Candidate.from_dict({"max_fusion_size": 8})),      # the one that crashes
             Finalist("tuned #2", Candidate.from_dict({"max_fusion_size": 32})))


def knob_crash_model(folder: Path, fault: str) -> str:
    source = KNOB_CRASH.read_text()
    assert '\nFAULT = "abort"\n' in source
    path = folder / f"knob_crash_{fault}.py"
    path.write_text(source.replace('\nFAULT = "abort"\n', f"\nFAULT = {fault!r}\n", 1))
    return str(path)


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # A cache hit would skip the trace in which the model sees its compile's knobs.
    monkeypatch.setenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    built = LocalExecutor(scratch=str(tmp_path))
    yield built
    built.close()


@pytest.mark.parametrize(("fault", "status", "says"), [
    pytest.param("abort", Status.CRASHED, "killed by SIGABRT", id="abort-in-its-compile"),
    pytest.param("raise", Status.RUNTIME_ERROR, "RuntimeError: knob_crash: call 11", id="raise-in-the-rounds"),
    pytest.param("segv", Status.CRASHED, "killed by SIGSEGV", id="segv-in-the-rounds", marks=pytest.mark.slow),
    pytest.param("compile", Status.COMPILE_ERROR, "BackendCompilerFailed", id="compile-error",
                 marks=pytest.mark.slow),
])
def test_a_crashing_finalist_is_recorded_and_the_others_are_confirmed(tmp_path: Path, executor, fault: str,
                                                                       status: Status, says: str) -> None:
    spec = MeasureSpec(model_path=knob_crash_model(tmp_path, fault), repeat=3, timeout_s=600)
    runs: list[tuple[str, ...]] = []
    real = executor.run_confirmation

    def each_process(req):      # what each fresh confirmation process was asked to measure
        runs.append(tuple(label for label, _ in req.variants))
        return real(req)

    executor.run_confirmation = each_process
    verdict = conclude(lambda req: _confirm(executor, req), spec, FINALISTS, rounds=ROUNDS)
    selection = verdict.selection
    assert [v.label for v in selection.variants] == [EAGER, DEFAULT, "tuned #1", "tuned #2"]
    crashed = selection.get("tuned #1")
    assert crashed.status is status and says in crashed.error and crashed.round_ms == ()
    for label in (EAGER, DEFAULT, "tuned #2"):        # measured side by side in the fresh process
        # every one the same rounds: the first look's, or a later one's (the sequential test, ConfirmRequest.looks)
        assert selection.get(label).status is Status.OK and len(selection.get(label).round_ms) in (ROUNDS, 2 * ROUNDS,
                                                                                                 4 * ROUNDS), label
    # the first run held every variant, the second (a fresh process) all but the crashed one
    assert runs[0] == (EAGER, DEFAULT, "tuned #1", "tuned #2")
    assert runs[1] == (EAGER, DEFAULT, "tuned #2")
    # then, when the selection chose anything but the defaults, the claim run of its own (without tuned #1)
    claimed_apart = verdict.claim_run is not verdict.selection
    assert len(runs) == 2 + claimed_apart and all("tuned #1" not in run for run in runs[1:])
    assert verdict.chosen != "tuned #1"


def test_a_confirmation_the_oom_killer_ends_holding_four_variants_confirms_the_best_ranked(executor) -> None:
    """On a CPU, running out of memory is the kernel's SIGKILL, not a MemoryError: oom_killed_mlp.py
    has room for 3 copies and is killed loading a 4th, so the selection run of eager, the default
    and two finalists dies preparing its 4th variant in its compile order. The variant it was
    preparing was recorded as crashed (eager, or a finalist), or, the default, the whole
    confirmation failed. Now the process said it held 4: the run is crowded, the rerun leaves out
    the lowest-ranked finalist (not confirmed, and why), and nothing is recorded as crashed."""
    spec = MeasureSpec(str(MODELS / "oom_killed_mlp.py"), repeat=3, timeout_s=600)
    req = request(spec, [(EAGER, None), (DEFAULT, Candidate()),
                         ("tuned #1", Candidate.from_dict({"max_fusion_size": 32})),
                         ("tuned #2", Candidate.from_dict({"max_fusion_size": 16}))], 2, stage="selection")
    runs: list[tuple[str, ...]] = []

    def each_run(r):
        runs.append(tuple(label for label, _ in r.variants))
        return executor.run_confirmation(r)

    result = confirm_through(each_run, req)
    assert isinstance(result, ConfirmResult), result
    assert runs == [(EAGER, DEFAULT, "tuned #1", "tuned #2"), (EAGER, DEFAULT, "tuned #1")]
    for label in (EAGER, DEFAULT, "tuned #1"):
        # 2 rounds, or as many as a later look of the sequential test took (ConfirmRequest.looks)
        assert result.get(label).status is Status.OK and len(result.get(label).round_ms) in (2, 4, 8), result.get(label)
    left_out = result.get("tuned #2")
    assert left_out.status is Status.CANCELLED and left_out.round_ms == ()
    assert left_out.error.startswith("not confirmed: the confirmation ran out of memory holding 4 variants at "
                                     "once (trial process killed by SIGKILL (possibly out of memory)"), left_out.error


def test_eager_that_stops_the_run_ends_the_confirmation_and_says_so() -> None:
    """The model itself raising while eager is timed is no finalist's fault: nothing is dropped,
    and the error names eager (the default, cancelled with it, has no error of its own)."""
    from tuner.errors import TunerError

    stopped = ConfirmResult(variants=(VariantResult(EAGER, Status.RUNTIME_ERROR, error="RuntimeError: boom"),
                                      VariantResult(DEFAULT, Status.CANCELLED),
                                      *(VariantResult(f.label, Status.CANCELLED) for f in FINALISTS)),
                            stopped_by=EAGER)
    with pytest.raises(TunerError) as info:
        conclude(lambda req: confirm_through(lambda r: stopped, req), MeasureSpec(model_path="m.py"), FINALISTS,
                 rounds=ROUNDS)
    assert "the run stopped at eager (runtime_error: RuntimeError: boom)" in str(info.value)


def failed(label: str | None, status: Status = Status.CRASHED) -> ConfirmFailed:
    return ConfirmFailed(status, "trial process killed by SIGSEGV before reporting a result\nlast line", variant=label)


def measured(labels: tuple[str, ...]) -> ConfirmResult:
    return ConfirmResult(variants=tuple(VariantResult(label, Status.OK, round_ms=(1.0,) * ROUNDS) for label in labels))


def test_only_a_crash_pinned_on_a_finalist_is_survived() -> None:
    req = request(MeasureSpec(model_path="m.py"), [(DEFAULT, Candidate()), *((f.label, f.candidate) for f in FINALISTS)],
                  ROUNDS, stage="claim")
    # the default compile's crash, one outside every variant, or a deadline: the confirmation fails
    for outcome in (failed(DEFAULT), failed(None), failed("tuned #1", Status.TIMEOUT)):
        assert confirm_through(lambda r, o=outcome: o, req) == outcome
    # eager is the model itself, as the default is: a death while on it drops no finalist, nor eager
    with_eager = request(MeasureSpec(model_path="m.py"), [(EAGER, None), (DEFAULT, Candidate()),
                                                            *((f.label, f.candidate) for f in FINALISTS)], ROUNDS,
                         stage="selection")
    held = []
    assert confirm_through(lambda r: held.append(len(r.variants)) or failed(EAGER), with_eager) == failed(EAGER)
    assert held == [4]
    # both finalists crash in turn: each recorded, the default measured alone at last
    outcomes = iter([failed("tuned #2"), failed("tuned #1"), measured((DEFAULT,))])
    seen = []
    result = confirm_through(lambda r: seen.append((len(r.variants), r.stage)) or next(outcomes), req)
    assert seen == [(3, "claim"), (2, "claim"), (1, "claim")]      # a rerun keeps its run's stage
    assert [(v.label, v.status) for v in result.variants] == [
        (DEFAULT, Status.OK), ("tuned #1", Status.CRASHED), ("tuned #2", Status.CRASHED)]
    assert result.get("tuned #2").error == "trial process killed by SIGSEGV before reporting a result (last line)"
