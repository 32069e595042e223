"""Measurement pieces that need no Inductor compile: output checks, statistics, the shared
measurement core on eager and on a first call that fails while Dynamo traces."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers.faults import faulty_model
from helpers import MODELS
from tuner.measure import Rejected, Runner, compare_outputs, prepare
from tuner.trial import (DEFAULT, EAGER, ConfirmFailed, ConfirmRequest, ConfirmResult, MeasureSpec, Measurement,
                         Status, TrialRequest, VariantResult, median_and_iqr, speedup)
from tuner.trial.stats import median_interval


def test_compare_outputs_by_dtype() -> None:
    ref = [torch.ones(4)]
    assert compare_outputs(ref, [torch.ones(4) + 1e-6]) is None
    assert "exceeds" in compare_outputs(ref, [torch.ones(4) + 1e-2])
    bf = [torch.ones(4, dtype=torch.bfloat16)]
    assert compare_outputs(bf, [bf[0] * 1.01]) is None                       # within bf16 tolerance
    assert "NaN" in compare_outputs(ref, [torch.tensor([1.0, float("nan"), 1.0, 1.0])])
    assert "Inf" in compare_outputs(ref, [torch.tensor([1.0, float("inf"), 1.0, 1.0])])
    assert "tensors" in compare_outputs(ref, [])
    assert compare_outputs([torch.arange(3)], [torch.arange(3) + 1]) is not None


def test_median_and_iqr() -> None:
    median, iqr = median_and_iqr([1.0, 2.0, 3.0, 4.0, 100.0])
    assert median == 3.0 and 0 < iqr < 100


def test_median_interval_covers_the_median_and_narrows_with_rounds() -> None:
    few = [0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    lo, hi = median_interval(few)
    assert lo <= 1.2 <= hi
    many = [1.0 + 0.01 * (i % 10) for i in range(60)]
    lo2, hi2 = median_interval(many)
    assert hi2 - lo2 < hi - lo


def _variant(label: str, ms: list[float]) -> VariantResult:
    return VariantResult(label, Status.OK, compile_s=1.0, round_ms=tuple(ms))


def test_values_round_trip_through_json() -> None:
    request = TrialRequest(spec=MeasureSpec("m.py", threads=2), params=(("max_fusion_size", 8),), number=3)
    assert TrialRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    m = Measurement(status=Status.OK, latency_ms=1.5, spread_ms=0.1, compile_s=3.0, reps=20, threads=2)
    assert Measurement.from_json(json.loads(json.dumps(m.to_json()))) == m
    older = {k: v for k, v in m.to_json().items() if k != "threads"}     # recorded before `threads` existed
    assert Measurement.from_json(older).threads is None
    conf = ConfirmRequest(spec=MeasureSpec("m.py", seed=3), variants=((EAGER, None), (DEFAULT, ()), ("x", (("a", 1),))))
    assert ConfirmRequest.from_json(json.loads(json.dumps(conf.to_json()))) == conf
    result = ConfirmResult((_variant(DEFAULT, [1.0, 2.0]),), threads=2)
    assert ConfirmResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    failed = ConfirmFailed(Status.TIMEOUT, "timeout: no result within 5 s")
    assert ConfirmFailed.from_json(json.loads(json.dumps(failed.to_json()))) == failed
    stopped = ConfirmResult((_variant(DEFAULT, [1.0]),), stopped_by="x")    # a finalist raised in the rounds
    assert ConfirmResult.from_json(json.loads(json.dumps(stopped.to_json()))) == stopped
    crashed = ConfirmFailed(Status.CRASHED, "trial process killed by SIGABRT", variant="x")
    assert ConfirmFailed.from_json(json.loads(json.dumps(crashed.to_json()))) == crashed
    crowded = ConfirmFailed(Status.CRASHED, "trial process killed by SIGKILL", variant="x", crowded=4)   # Ray's way
    assert ConfirmFailed.from_json(json.loads(json.dumps(crowded.to_json()))) == crowded
    assert speedup(_variant(DEFAULT, [2.0] * 4), _variant("x", [1.0] * 4)).median == 2.0


def test_prepare_verifies_eager_and_rejects_a_first_call_that_fails(tmp_path: Path) -> None:
    eager = prepare(MeasureSpec(str(MODELS / "tiny_mlp.py")), None)
    assert isinstance(eager, Runner) and eager.compile_s is None and eager.device == "cpu"
    assert eager.call().shape == (8, 32)
    rejected = prepare(MeasureSpec(faulty_model(tmp_path, "raise")), ())
    assert isinstance(rejected, Rejected) and rejected.status is Status.RUNTIME_ERROR
    assert rejected.headline == "RuntimeError: injected fault (tests/models/faulty_mlp.py)"
    assert "Traceback" in rejected.message


RECOMPILE_CHECK = """
import json, sys
import torch._dynamo.utils as utils
from tuner.measure import run_confirmation
from tuner.trial import ConfirmRequest, MeasureSpec
variants = tuple((f"v{i}", (("max_fusion_size", 8 + i),)) for i in range(10))
result = run_confirmation(ConfirmRequest(spec=MeasureSpec(sys.argv[1]), variants=variants, rounds=2,
                                         samples_per_round=1))
print(json.dumps({"ok": [v.status.value for v in result.variants], "frames": utils.counters["frames"]["ok"]}))
"""


@pytest.mark.slow
def test_a_confirmation_compiles_every_variant_of_a_library_model(tmp_path: Path) -> None:
    """Ten variants share one `forward` code object (the class comes from an imported module, as
    torchvision's do): none may run uncompiled past Dynamo's recompile limit (8 by default)."""
    import subprocess
    import sys

    from helpers import cli_env

    ran = subprocess.run([sys.executable, "-c", RECOMPILE_CHECK, str(MODELS / "library_mlp.py")],
                         env=cli_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["ok"] == ["ok"] * 10
    assert found["frames"] >= 10, found          # each variant compiled, none ran eagerly


COUNTING_MODEL = '''
import time
import torch

class Counting(torch.nn.Module):
    def forward(self, x):
        with open({log!r}, "a") as log:
            log.write("x")
        time.sleep(0.003)          # longer than a CPU sample's minimum: one call per sample
        return x * 2

def get_model():
    return Counting()

def get_inputs():
    return (torch.ones(4),)
'''


def test_a_confirmation_honours_the_spec_warmup(tmp_path: Path) -> None:
    """The confirmation warms up as the spec says, as a trial does (it used RoundPlan's default 3)."""
    from tuner.measure import run_confirmation

    calls = {}
    for warmup in (1, 8):
        log = tmp_path / f"calls-{warmup}"
        model = tmp_path / f"counting_{warmup}.py"
        model.write_text(COUNTING_MODEL.format(log=str(log)))
        result = run_confirmation(ConfirmRequest(spec=MeasureSpec(str(model), warmup=warmup), variants=((EAGER, None),),
                                                 rounds=2, samples_per_round=1))
        assert result.get(EAGER).status is Status.OK
        calls[warmup] = len(log.read_text())
    assert calls[8] - calls[1] == 7
