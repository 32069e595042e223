"""What `compile_s` means (`tuner.measure.compile_time`, docs/measurement.md): a config's own
compile in a process whose compiler is warm, the same for every config. The first compile of a
process paid 5-7 s more here (Dynamo's and Inductor's set-up), and it went to whichever config
compiled first: a trial's default compile (its candidate then looked cheap), the defaults' own
trial, a confirmation's first variant. Now a probe pays it before the first measured compile."""
from __future__ import annotations

import pytest

from helpers import MODELS
from tuner.measure import Runner, prepare
from tuner.measure import compile_time
from tuner.trial import MeasureSpec
from tuner.workload import load_model_file


def test_the_compiler_is_warmed_once_before_the_first_measured_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    # as in a fresh process: another test in this worker may have warmed the probe, and a later
    # torch._dynamo.reset() dropped its cache entry
    monkeypatch.setattr(compile_time, "_warmed", {})
    torch._dynamo.reset()
    eager = prepare(MeasureSpec(str(MODELS / "tiny_mlp.py")), None)     # compiles nothing, so warms nothing
    assert isinstance(eager, Runner) and eager.compile_s is None
    compiled = prepare(MeasureSpec(str(MODELS / "tiny_mlp.py")), ())
    assert isinstance(compiled, Runner) and compiled.compile_s is not None
    assert compile_time._warmed.get("cpu", 0.0) > 0.0              # the probe ran in this process
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(compile_time._probe.__code__)
    assert len(entries) == 1                                        # compiled once, by Dynamo and Inductor
    assert compile_time.warm_compiler(load_model_file(MODELS / "tiny_mlp.py")) == 0.0     # and never again
    again = prepare(MeasureSpec(str(MODELS / "tiny_mlp.py")), (("max_fusion_size", 32),))
    assert isinstance(again, Runner)
    assert len(torch._dynamo.eval_frame._debug_get_cache_entry_list(compile_time._probe.__code__)) == 1
