"""The correctness gate scales with the values (tuner.measure.verify): an fp64 eager reference
decides how far a compiled output may stray, so small values that are wrong fail and an eager
that is itself inexact (TF32) does not fail correct configs; gradients compare per parameter by
norm-relative error and cosine similarity; complex outputs by magnitude; integer outputs may
differ only at ties, and the gate says so; NaN never passes a precision check; and the calls
after the first (cudagraph replays) are compared too."""
from __future__ import annotations

import torch

from helpers import MODELS
from tuner.measure import Rejected, Runner, compare_gradients, compare_outputs, prepare, verify_outputs
from tuner.measure.accuracy import accuracy_problem
from tuner.trial import MeasureSpec, Status
from tuner.workload import compare_steps, load_model_file, loss_call, run_step
from tuner.workload.training import StepResult

EXAMPLES = MODELS.parents[1] / "examples"


def test_small_outputs_that_are_wrong_fail() -> None:
    """Softmax over 1000 classes: most probabilities are below 1e-4, where a fixed atol passed zeros."""
    torch.manual_seed(0)
    logits = torch.randn(8, 1000) * 3
    probs = torch.softmax(logits, dim=-1)
    wide = torch.softmax(logits.double(), dim=-1)
    zeroed = torch.where(probs < 1e-4, torch.zeros_like(probs), probs)
    assert float((probs < 1e-4).float().mean()) > 0.5
    assert "exceeds" in compare_outputs([probs], [zeroed], [wide])
    assert "exceeds" in compare_outputs([probs], [zeroed])           # without fp64 too: relative to the values
    assert compare_outputs([probs], [torch.softmax(logits, dim=-1)], [wide]) is None


def test_an_inexact_eager_does_not_fail_a_correct_config() -> None:
    """cuDNN's default TF32 convolutions put eager about 1e-3 off fp64; a compiled config (BN folded
    into the conv weights by freezing) is as far off in its own way. Against eager with a fixed
    1e-4 tolerance it failed; against fp64 it is as good as eager, so it passes."""
    torch.manual_seed(1)
    wide = torch.randn(64, 256, dtype=torch.float64)
    eager = (wide * (1 + 1e-3 * torch.randn_like(wide))).float()
    compiled = (wide * (1 + 1e-3 * torch.randn_like(wide))).float()
    assert not torch.allclose(eager, compiled, rtol=1e-4, atol=1e-4)
    assert compare_outputs([eager], [compiled], [wide]) is None
    far = (wide * (1 + 1e-2 * torch.randn_like(wide))).float()         # ten times eager's error
    assert "exceeds 3x eager's own" in compare_outputs([eager], [far], [wide])


def test_zeroed_small_gradients_of_the_train_block_example_fail() -> None:
    """examples/train_block.py: about 63% of in_proj_weight's gradients are below 1e-4; a step that
    zeroes exactly those passed `atol=1e-4`, and fails by norm-relative error per parameter."""
    loaded = load_model_file(EXAMPLES / "train_block.py")
    loss = loss_call(loaded)
    ref = run_step(loaded.model, lambda: loss(loaded.model), None, loaded.path)
    grads = dict(ref.grads)
    g = grads["self_attn.in_proj_weight"]
    assert float((g.abs() < 1e-4).float().mean()) > 0.5
    zeroed = StepResult(ref.loss, tuple((n, torch.where(t.abs() < 1e-4, torch.zeros_like(t), t)
                                         if n == "self_attn.in_proj_weight" else t) for n, t in ref.grads))
    mismatch = compare_steps(ref, zeroed, compare_gradients)
    assert mismatch.startswith("gradient of self_attn.in_proj_weight: norm-relative error"), mismatch
    assert compare_steps(ref, StepResult(ref.loss, tuple((n, t * (1 + 1e-6)) for n, t in ref.grads)),
                         compare_gradients) is None


def test_complex_outputs_compare_by_magnitude() -> None:
    torch.manual_seed(2)
    wide = torch.randn(32, dtype=torch.complex128)
    eager = wide.to(torch.complex64)
    close = (wide * (1 + 1e-7j)).to(torch.complex64)     # a rotation within rounding: not bit-equal
    assert not torch.equal(eager, close)
    assert compare_outputs([eager], [close], [wide]) is None
    assert "exceeds" in compare_outputs([eager], [eager.conj()], [wide])


def test_integer_outputs_may_differ_only_at_ties_and_the_gate_says_so() -> None:
    eager = torch.tensor([0, 3, 1])       # argmax in fp32: row 0 is a near tie that rounding decided
    fp64 = torch.tensor([2, 3, 1])        # fp64 eager picks the other side of that tie
    tie = verify_outputs([eager], [torch.tensor([2, 3, 1])], [fp64])
    assert tie.mismatch is None and "ties" in tie.note and "1 of 3" in tie.note
    wrong = compare_outputs([eager], [torch.tensor([0, 2, 1])], [fp64])
    assert "differ only at ties" in wrong and "not ties" in wrong
    assert compare_outputs([eager], [torch.tensor([2, 3, 1])]) is not None     # no fp64: nothing says it is a tie


def test_nan_in_a_precision_checks_fresh_reference_is_a_failure() -> None:
    reference = [torch.tensor([1.0, float("nan"), 2.0])]
    problem, error = accuracy_problem(reference, [torch.tensor([1.0, 0.5, 2.0])])
    assert problem is not None and "NaN" in problem
    ok, _ = accuracy_problem([torch.tensor([1.0, 2.0])], [torch.tensor([1.0, 2.0])])
    assert ok is None


def test_a_call_after_the_first_is_compared_too() -> None:
    """With cudagraphs the first call is the warm-up, outside the graph; the replays are what is
    timed and what users run. A model right on its first compiled call and wrong after is rejected."""
    runner = prepare(MeasureSpec(str(MODELS / "drifting_output.py")), ())
    assert isinstance(runner, Rejected) and runner.status is Status.WRONG_RESULT, runner
    assert runner.headline.startswith("call 2 (after a first that matched): output 0:"), runner.headline
    steady = prepare(MeasureSpec(str(MODELS / "tiny_mlp.py")), ())
    assert isinstance(steady, Runner), getattr(steady, "message", steady)


def test_a_few_garbage_values_fail_the_gate() -> None:
    """An RMS bound lets about 0.03% of bf16 values be anything (as torch._dynamo.utils.same does):
    four sign-flipped values of 100,000 passed it. Each value is bounded against fp64 too, and a
    correct compile that rounds otherwise than eager still passes."""
    torch.manual_seed(3)
    wide = torch.randn(100_000, dtype=torch.float64)
    eager = wide.bfloat16()
    rounded_otherwise = (wide * (1 + 2e-3 * torch.randn_like(wide))).bfloat16()
    assert compare_outputs([eager], [rounded_otherwise], [wide]) is None
    garbage = rounded_otherwise.clone()
    at = ((wide.abs() > 0.5) & (wide.abs() < 1)).nonzero()[[1, 10, 100, 1_000], 0]   # typical values, sign flipped:
    garbage[at] = -garbage[at]                                      # the RMS error stays within its bound
    mismatch = compare_outputs([eager], [garbage], [wide])
    assert mismatch is not None and "4 of 100000 values are off fp64 eager" in mismatch, mismatch
    small = torch.randn(64, 64, dtype=torch.float64)        # fp32: one value of 4096 off by 5e-4
    broken = small.float().clone()
    broken[3, 5] += 5e-4
    assert "1 of 4096 values" in compare_outputs([small.float()], [broken], [small])


def test_gradients_are_judged_against_an_fp64_step() -> None:
    """A TF32 step: eager and a correct compile each about 0.5% off fp64, 0.7% off each other. Against
    fp32 eager with a fixed 5e-3 it failed (every trial of such a search would); against the fp64
    step it is as good as eager. A gradient ten times worse than eager still fails, and the loss
    (one value, where eager may hit fp64 by chance) is held to the step's precision."""
    from tuner.measure.verify import eager_precision

    torch.manual_seed(4)
    wide = torch.randn(256, 64, dtype=torch.float64)
    eager = (wide * (1 + 5e-3 * torch.randn_like(wide))).float()
    compiled = (wide * (1 + 5e-3 * torch.randn_like(wide))).float()
    assert compare_gradients([eager], [compiled]) is not None
    assert compare_gradients([eager], [compiled], [wide]) is None
    worse = (wide * (1 + 5e-2 * torch.randn_like(wide))).float()
    assert "exceeds" in compare_gradients([eager], [worse], [wide])
    loss_wide = torch.tensor(2.0, dtype=torch.float64)
    loss_eager, loss_compiled = torch.tensor(2.0 * (1 + 1e-4)), torch.tensor(2.0 * (1 - 4e-3))
    floor = eager_precision([loss_eager, eager], [loss_wide, wide])
    assert 4e-3 < floor < 6e-3
    assert compare_gradients([loss_eager], [loss_compiled], [loss_wide]) is not None    # 40x eager's own, alone
    assert compare_gradients([loss_eager], [loss_compiled], [loss_wide], floor=floor) is None
    assert compare_gradients([loss_eager], [torch.tensor(2.2)], [loss_wide], floor=floor) is not None


def test_a_correct_compile_of_an_inexact_training_step_passes() -> None:
    """tests/models/inexact_train.py: eager and the compiled step are each 1% off the fp64 step in
    their own way. The default compile was WRONG_RESULT against fp32 eager's fixed limits."""
    runner = prepare(MeasureSpec(str(MODELS / "inexact_train.py"), mode="train"), ())
    assert isinstance(runner, Runner), getattr(runner, "message", runner)


def test_later_calls_of_a_reduced_precision_and_later_training_steps_are_compared() -> None:
    """--precision and train mode checked only the first call or step; a replay (cudagraphs) that
    differs is now rejected there too, as in fp32 inference."""
    drifting = MeasureSpec(str(MODELS / "drifting_output.py"), tolerance=1e-1)
    runner = prepare(drifting, (("precision", "bf16-autocast"),))
    assert isinstance(runner, Rejected) and runner.status is Status.WRONG_RESULT, runner
    assert "call 2 on the file's inputs, after a first that matched" in runner.headline, runner.headline
    steps = prepare(MeasureSpec(str(MODELS / "drifting_step.py"), mode="train"), ())
    assert isinstance(steps, Rejected) and steps.status is Status.WRONG_RESULT, steps
    assert steps.headline.startswith("training step 2 (from the same weights, after a first that matched): "), \
        steps.headline
    steady = prepare(MeasureSpec(str(MODELS / "tiny_train.py"), mode="train"), ())
    assert isinstance(steady, Runner), getattr(steady, "message", steady)
