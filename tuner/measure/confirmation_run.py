"""A confirmation run, inside the confirmation process: re-measure the finalists against the
default compile, interleaved and paired.

The confirmation's four parts, one per floor's job: its request and result values
(`tuner.trial.confirmation`), this run, the driver's reruns without a finalist that crashed it
(`tuner.search.confirmation_retries`), and what to run, choose and claim (`tuner.search.verdict`).
"""
from __future__ import annotations

from typing import Any, Callable

from tuner.trial import DEFAULT, ConfirmRequest, ConfirmResult, Status, VariantResult

__all__ = ["run_confirmation"]


def run_confirmation(request: ConfirmRequest, *, mark: Callable[[str, int], None] | None = None,
                     report: Callable[[dict[str, Any]], None] | None = None) -> ConfirmResult:
    """Trial-process side: get each variant ready in a fresh model copy, then interleave rounds.

    Each variant goes through `tuner.measure.prepare`, as a trial does, in the order
    `request.rng("compile")` shuffles (seeded by the run's stage, so the selection, ablation and
    claim runs each compile in an order of their own). One whose output differs from eager is
    reported as WRONG_RESULT and takes no part in the rounds. The rounds follow `request.plan()`
    in the order `request.rng("rounds")` shuffles: the spec's warm-up, then as many calls per
    sample for every variant (`tuner.trial.timing.calls_per_sample`). A variant that fails to compile or run, while prepared or during the
    rounds, stops the run there: it is reported with its status and named in `stopped_by`, and
    every other variant is CANCELLED, to be measured in a fresh process (`tuner.search.confirmation_retries`).
    Running out of memory while other variants are resident (preparing one, or in the rounds) stops
    it the same way, with `ConfirmResult.crowded` set: the process could not hold them all, which
    says nothing against the variant it hit (a large model's finalists each fit beside the default
    in their trials), so the driver runs again with fewer variants instead of dropping that one.

    `mark` is told the label of the variant about to be prepared or timed, outside the timed
    calls, and how many variants the process then holds (the ones prepared so far and that one
    while preparing; every one it times in the rounds): `workers/trial_process.py` keeps both where
    a process that dies leaves them behind, so a process the kernel's out-of-memory killer ended
    (SIGKILL, no MemoryError to catch) holding several is known to be crowded too
    (`tuner.trial.ConfirmFailed.crowded`).

    `report` is how this process hands in a result and ends (`workers/trial_process.py`): with it,
    a variant's call under the compile lock that never returns (`tuner.measure.watchdog`) stops the
    run there as TIMEOUT, as a failing variant does.
    """
    from tuner.measure.core import allow_variants, apply_threads
    from tuner.measure.watchdog import finishing

    current = [""]

    def note(label: str, holding: int) -> None:
        current[0] = label
        if mark is not None:
            mark(label, holding)

    threads = apply_threads(request.spec)
    allow_variants(len(request.variants))

    def hung(message: str) -> None:
        failed = VariantResult(current[0], Status.TIMEOUT, error=message)
        report(_stopped(request, current[0], failed, threads).to_json())  # type: ignore[misc]

    with finishing(hung if report is not None else None):
        return _run(request, note, current, threads)


def _run(request: ConfirmRequest, note: Callable[[str, int], None], current: list[str], threads: int) -> ConfirmResult:
    """`run_confirmation`'s run, `note` told each variant and how many the process holds, `current` the last one."""
    import torch

    from tuner.measure.core import Rejected, Runner, error_headline, failure, out_of_memory, prepare
    from tuner.measure.node_lock import measure_lock
    from tuner.trial import interleaved_rounds

    prepared: dict[str, Runner | Rejected] = {}
    # Compiled in an order of this run's own (ConfirmRequest.rng): autotune picks, memory layout and
    # what one compile sets up for the next are not shared between the run that chooses and the one that claims.
    for label, params in request.rng("compile").sample(list(request.variants), len(request.variants)):
        resident = sum(isinstance(r, Runner) for r in prepared.values())
        note(label, resident + 1)
        try:
            prepared[label] = runner = prepare(request.spec, params)
        except Exception as exc:  # the load or the references ran out of memory beside the others: a value
            if not (resident and out_of_memory(exc)):
                raise
            prepared[label] = runner = Rejected(*failure(exc, request.spec, Status.CRASHED), out_of_memory=True)
        if isinstance(runner, Rejected) and runner.status is not Status.WRONG_RESULT:
            # A compile or call that failed may leave this process unsound (an asynchronous CUDA error
            # poisons the device for every later call): the others are measured in a fresh one.
            return _stopped(request, label, VariantResult(label, runner.status, error=runner.headline), threads,
                            crowded=resident + 1 if runner.out_of_memory and resident else None)
    runners: dict[str, Runner] = {}
    results: dict[str, VariantResult] = {}
    for label, _ in request.variants:        # the request's order again: the first is the rounds' baseline
        runner = prepared[label]
        if isinstance(runner, Rejected):
            results[label] = VariantResult(label, runner.status, error=runner.headline)
        else:
            runners[label] = runner
    rounds: dict[str, list[float]] = {label: [] for label in runners}
    if runners:
        with torch.no_grad(), measure_lock(next(iter(runners.values())).device):
            try:
                # A sequential run stops once every variant is decided against the default compile
                # (against the first variant where the default is not measured: an ablation).
                baseline = DEFAULT if DEFAULT in runners else next(iter(runners))
                rounds = interleaved_rounds(runners, request.plan(), baseline=baseline,
                                            rng=request.rng("rounds"),
                                            on_variant=lambda label: note(label, len(runners)))
            except Exception as exc:  # a finalist that fails while timed is a value, as trials' failures are
                oom = out_of_memory(exc)
                failed = VariantResult(current[0], Status.CRASHED if oom else Status.RUNTIME_ERROR,
                                       error=("out of memory: " if oom else "") + error_headline(exc))
                return _stopped(request, current[0], failed, threads,
                                crowded=len(runners) if oom and len(runners) > 1 else None)
    for label, runner in runners.items():
        results[label] = VariantResult(label, Status.OK, compile_s=runner.compile_s, round_ms=tuple(rounds[label]))
    return ConfirmResult(variants=tuple(results[label] for label, _ in request.variants), threads=threads)


def _stopped(request: ConfirmRequest, label: str, failed: VariantResult, threads: int, *,
             crowded: int | None = None) -> ConfirmResult:
    """The run cut short by `label`'s failure: it as `failed`, every other variant CANCELLED (no rounds);
    `crowded`: it ran out of memory holding that many variants."""
    return ConfirmResult(variants=tuple(failed if other == label else VariantResult(other, Status.CANCELLED)
                                        for other, _ in request.variants), threads=threads, stopped_by=label,
                         crowded=crowded)
