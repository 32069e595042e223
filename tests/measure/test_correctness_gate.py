"""The correctness gate can never pass vacuously: model files whose eager output holds no
tensor, holds NaN, or changes between two calls are refused before any trial (one line,
exit 1, nothing written), and `compare_outputs` treats ±Inf exactly and an empty or NaN
reference as a mismatch. The bad models are real files under tests/models/."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import MODELS, cli_env, run_main
from tuner.errors import ModelFileError
from tuner.measure import Runner, compare_outputs, prepare
from tuner.trial import MeasureSpec
from tuner.workload import eager_reference, load_model_file

FIX_NO_TENSOR = "so compiled results cannot be checked against eager; return the output tensor(s) from forward()"
FIX_NAN = ("so compiled results cannot be checked against it; fix the model or get_inputs() so that "
           "eager gives no NaN")
FIX_RANDOM = ("so every compiled result would look wrong; make forward() deterministic: return the model in "
              "eval mode (`return MyModel().eval()` turns dropout off) and seed or remove random ops")

REFUSED = {
    "bad_no_tensor_output.py": ("the output of model {path} holds no tensor (it is {{'mean': ", FIX_NO_TENSOR),
    "bad_nan_output.py": ("the eager output of model {path} holds NaN (output 0: ", FIX_NAN),
    "bad_dropout_on.py": ("model {path} gives different outputs on two eager runs with the same inputs "
                          "(output 0: ", FIX_RANDOM),
    "bad_random_op.py": ("model {path} gives different outputs on two eager runs with the same inputs "
                         "(output 0: 32 of 32 values differ)", FIX_RANDOM),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_search_refuses_a_model_no_trial_could_check(tmp_path: Path, name: str) -> None:
    path = MODELS / name
    db = tmp_path / "never.db"
    done = run_main("search", str(path), "--trials", "2", "--executor", "local", "--db", f"sqlite:///{db}",
                    env=cli_env())
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    start, fix = REFUSED[name]
    assert lines[0].startswith("error: " + start.format(path=path)), lines[0]
    assert lines[0].endswith(fix), lines[0]
    assert not db.exists()        # refused before the store was opened: nothing written


def test_eager_reference_refuses_before_returning() -> None:
    with pytest.raises(ModelFileError, match="holds no tensor"):
        eager_reference(load_model_file(MODELS / "bad_no_tensor_output.py"))


def test_deterministic_models_pass_the_gate_inf_included() -> None:
    bn = eager_reference(load_model_file(MODELS / "dropout_bn.py"))          # dropout present, but eval()
    assert bn.shape == (4, 8)
    logits = eager_reference(load_model_file(MODELS / "masked_logits.py"))
    assert bool(torch.isneginf(logits).any()) and bool(torch.isposinf(logits).any())
    assert not bool(torch.isnan(logits).any())


def test_a_model_left_in_train_mode_is_refused_only_for_its_dropout() -> None:
    """dropout_bn in train mode: batch norm alone is deterministic, dropout is not."""
    loaded = load_model_file(MODELS / "dropout_bn.py")
    loaded.model.train()
    with pytest.raises(ModelFileError, match="gives different outputs on two eager runs"):
        eager_reference(loaded)
    loaded.model[2].p = 0.0          # the same model without dropout passes, still in train mode
    eager_reference(loaded)


def test_compare_outputs_never_passes_vacuously() -> None:
    assert "no tensor" in compare_outputs([], [])
    nan_ref = [torch.tensor([1.0, float("nan")])]
    assert "NaN" in compare_outputs(nan_ref, [nan_ref[0].clone()])


def test_compare_outputs_needs_every_inf_in_place_with_its_sign() -> None:
    inf, ninf = float("inf"), float("-inf")
    ref = [torch.tensor([1.0, inf, ninf, 2.0])]
    assert compare_outputs(ref, [torch.tensor([1.0, inf, ninf, 2.0 + 1e-6])]) is None
    assert "±Inf" in compare_outputs(ref, [torch.tensor([1.0, ninf, ninf, 2.0])])      # sign flipped
    assert "±Inf" in compare_outputs(ref, [torch.tensor([1.0, 1e38, ninf, 2.0])])      # finite instead
    assert "±Inf" in compare_outputs(ref, [torch.tensor([1.0, float("nan"), ninf, 2.0])])
    assert "where eager is finite" in compare_outputs(ref, [torch.tensor([inf, inf, ninf, 2.0])])
    assert "exceeds" in compare_outputs(ref, [torch.tensor([1.5, inf, ninf, 2.0])])    # finite part still checked
    all_inf = [torch.full((3,), inf)]
    assert compare_outputs(all_inf, [all_inf[0].clone()]) is None


def test_a_compiled_candidate_reproduces_eager_inf_and_passes() -> None:
    """A real default compile of a model with ±Inf in its output matches eager."""
    runner = prepare(MeasureSpec(str(MODELS / "masked_logits.py")), ())
    assert isinstance(runner, Runner), getattr(runner, "message", runner)
    assert runner.compile_s is not None
