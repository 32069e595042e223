"""The process stage on stand-in timing processes: one knob at a time against the settings before it,
a value kept only when it clears the noise, and the claim gated on its even rounds, reported from its
odd ones (`tuner.search.process_stage`)."""
from __future__ import annotations

import random

from tuner.search.process_stage import DEFAULT_ARM, STORED_ARM, settle, tune_runtime, user_claim
from tuner.trial import MeasureSpec, ProcessRequest, ProcessTiming, Status

SPEC = MeasureSpec("model.py")
ALLOC = "runtime.allocator"
WAIT = "runtime.omp_wait_policy"
CHOICES = [(ALLOC, "glibc-retain"), (ALLOC, "jemalloc"), (WAIT, "passive"), (WAIT, "active")]


class Processes:
    """Stand-in timing processes: a config's latency is `base` (10 ms, `compiled` for the stored compile
    knobs) divided by each runtime setting's factor, times noise of `sigma`; `fail` settings crash."""

    def __init__(self, factors: dict[tuple[str, str], float], *, compiled: float = 8.0, sigma: float = 0.01,
                 fail: tuple[tuple[str, str], ...] = ()) -> None:
        self.factors, self.compiled, self.sigma, self.fail = factors, compiled, sigma, fail
        self.rng = random.Random(0)
        self.seen: list[ProcessRequest] = []

    def __call__(self, request: ProcessRequest) -> ProcessTiming:
        self.seen.append(request)
        if any(setting in self.fail for setting in request.runtime):
            return ProcessTiming.failed(request.label, Status.CRASHED, "trial process killed by SIGSEGV")
        ms = 10.0 if request.params == () else self.compiled
        for setting in request.runtime:
            ms /= self.factors.get(setting, 1.0)
        ms *= 1 + self.rng.gauss(0, self.sigma)
        return ProcessTiming(request.label, Status.OK, samples_ms=(ms,), latency_ms=ms)


def test_a_knob_that_clears_the_noise_is_kept_and_the_next_is_measured_on_top_of_it() -> None:
    run = Processes({(ALLOC, "glibc-retain"): 1.35, (ALLOC, "jemalloc"): 1.20})
    choice = tune_runtime(run, SPEC, (("freezing", True),), CHOICES)
    assert choice.runtime == ((ALLOC, "glibc-retain"),)
    alloc, wait = choice.steps
    assert (alloc.knob, alloc.chosen, wait.chosen) == (ALLOC, "glibc-retain", None)
    assert dict(alloc.effects)["glibc-retain"].clears_noise and dict(alloc.effects)["jemalloc"].clears_noise
    # the wait policy is measured with the allocator chosen before it, and every process runs the compile knobs
    assert all(r.params == (("freezing", True),) for r in run.seen)
    assert all((ALLOC, "glibc-retain") in r.runtime for r in run.seen if any(k == WAIT for k, _ in r.runtime))


def test_nothing_beyond_the_noise_keeps_the_process_as_it_starts() -> None:
    choice = tune_runtime(Processes({}, sigma=0.05), SPEC, (), CHOICES)
    assert choice.runtime == () and [s.chosen for s in choice.steps] == [None, None]


def test_a_setting_whose_process_fails_is_never_chosen_and_says_why() -> None:
    choice = tune_runtime(Processes({(ALLOC, "jemalloc"): 2.0}, fail=((ALLOC, "jemalloc"),)), SPEC, (), CHOICES)
    assert choice.runtime == ()
    assert dict(choice.steps[0].failures) == {"jemalloc": "trial process killed by SIGSEGV"}


def test_the_claim_gates_on_even_rounds_and_reports_odd_ones_against_a_plain_default_compile() -> None:
    run = Processes({(ALLOC, "glibc-retain"): 1.35})
    claim = user_claim(run, SPEC, (("freezing", True),), ((ALLOC, "glibc-retain"),))
    assert claim.gate.clears_noise and claim.claim.rounds == 10
    assert 1.6 < claim.claim.median < 1.8          # 10 ms against 8 / 1.35 ms
    defaults = [r for r in run.seen if r.label == DEFAULT_ARM]
    assert defaults and all(r.params == () and r.runtime == () for r in defaults)
    assert all(r.runtime == ((ALLOC, "glibc-retain"),) for r in run.seen if r.label == STORED_ARM)


class SlowStarts(Processes):
    """Stand-in processes of which every `every`-th starts `times` slower (what else the machine ran)."""

    def __init__(self, *args, every: int, times: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.every, self.times = every, times

    def __call__(self, request: ProcessRequest) -> ProcessTiming:
        timing = super().__call__(request)
        if len(self.seen) % self.every:
            return timing
        return ProcessTiming(request.label, Status.OK, samples_ms=(timing.latency_ms * self.times,),
                             latency_ms=timing.latency_ms * self.times)


def test_settle_keeps_the_defaults_when_fresh_processes_reverse_the_stored_config() -> None:
    slow = settle(Processes({}, compiled=11.0, sigma=0.05), SPEC, (("max_fusion_size", 8),), CHOICES)
    assert not slow.kept and slow.runtime == ()
    assert "it was not faster than the default compile" in slow.notes[-1]
    failing = settle(Processes({}, fail=((ALLOC, "glibc-retain"),)), SPEC, (), [(ALLOC, "glibc-retain")])
    assert failing.kept and failing.claim is None           # the failing knob was never chosen
    nothing = settle(Processes({}), SPEC, (), [])        # the defaults, no knob here: nothing to claim
    assert nothing.kept and nothing.claim is None
    fast = settle(Processes({(ALLOC, "glibc-retain"): 1.35}), SPEC, (), CHOICES)   # the defaults, with a knob
    assert fast.kept and fast.runtime == ((ALLOC, "glibc-retain"),) and fast.claim.claim.median > 1.3


def test_a_few_slow_starting_processes_widen_the_claim_but_do_not_veto_what_cleared_the_noise() -> None:
    """A config 1.25x faster whose claim has a fifth of its processes starting 20x slow: the deciding
    half's interval reaches below 1, its median stays above; the config is kept and the note says
    the fresh processes' figure is not beyond their noise."""
    run = SlowStarts({}, compiled=8.0, sigma=0.01, every=5, times=20.0)
    verdict = settle(run, SPEC, (("freezing", True),), [])
    gate = verdict.claim.gate
    assert gate.low < 1.0 < gate.median, gate
    assert verdict.kept and "faster by the median but not beyond the noise" in verdict.notes[-1]


def test_decided_arms_race_no_further_and_each_arm_checks_its_output_once() -> None:
    """A clear effect is decided at the first look (6 rounds); an arm within the noise goes on to 12."""
    run = Processes({(ALLOC, "glibc-retain"): 1.35}, sigma=0.03)
    choice = tune_runtime(run, SPEC, (), [(ALLOC, "glibc-retain"), (ALLOC, "jemalloc")])
    counts = {label: sum(r.label == label for r in run.seen) for label in ("current", "glibc-retain", "jemalloc")}
    assert counts["glibc-retain"] == 6 and counts["jemalloc"] == 12 and counts["current"] == 12, counts
    assert choice.runtime == ((ALLOC, "glibc-retain"),)
    checked = [r.label for r in run.seen if r.check]
    assert sorted(checked) == ["current", "glibc-retain", "jemalloc"]      # the first of each arm only


def test_the_time_cap_stops_trying_knobs_and_says_which() -> None:
    choice = tune_runtime(Processes({}), SPEC, (), CHOICES, time_cap_s=0.0)
    assert choice.steps == () and choice.runtime == ()
    assert choice.notes == ("runtime.allocator, runtime.omp_wait_policy not tried: the process stage had spent the "
                            "0 s it has for runtime knobs",)
    assert len(tune_runtime(Processes({}), SPEC, (), CHOICES, time_cap_s=3600.0).steps) == 2
