"""`tuner search --mode train`: whole training steps, checked on the loss and gradients.

The model is tests/models/tiny_train.py (an MLP with a regression loss); its
TINY_TRAIN_BREAK_GRAD marker makes the compiled forward double one layer's gradient while
every value stays the same, a real compiled step that only the gradient check can catch.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import MODELS, cli_env, run_cli, run_main

TRAIN = MODELS / "tiny_train.py"
ATTRS = MODELS / "train_attrs.py"      # get_loss calls model.train() and reads model.config


def train_workload(path: Path = TRAIN):
    """The training workload as `tuner search --mode train` captures it."""
    from tuner.workload import capture_workload, load_model_file, loss_call

    loaded = load_model_file(path)
    return capture_workload(loaded, grad=True, call=loss_call(loaded))


@pytest.mark.slow
def test_search_in_train_mode_stores_a_verdict_and_never_proposes_freezing(tmp_path: Path) -> None:
    """A real `tuner search --mode train` on a model whose get_loss uses the model as a Hugging Face
    training loop does (`model.train()`, `model.config`): the compiled model it receives behaves like
    the module it wrote, so every trial runs, a verdict is stored, and freezing is never proposed."""
    db = tmp_path / "t.db"
    env = cli_env(TUNER_DB=f"sqlite:///{db}")
    shutil.copy(ATTRS, tmp_path / "train_attrs.py")
    out = run_cli("search", "train_attrs.py", "--mode", "train", "--trials", "2", "--executor", "local",
                  "--repeat", "3", "--rounds", "12", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "stored:" in out.stdout and "no trial ran correctly" not in out.stdout, out.stdout
    with sqlite3.connect(db) as conn:
        trials = conn.execute("SELECT status, params, error FROM trials ORDER BY number").fetchall()
        workloads = {k for (k,) in conn.execute("SELECT DISTINCT workload_key FROM best_configs")}
    assert len(trials) == 2 and trials[0][0] == "ok", trials
    assert not any("has no attribute" in (error or "") for _, _, error in trials), trials
    assert not any("freezing" in json.loads(params or "{}") for _, params, _ in trials), trials
    assert workloads == {train_workload(ATTRS).key}


def test_train_space_has_no_freezing_and_has_the_partitioner_knob() -> None:
    from tuner.search_spaces import load_space

    train = {k.name for k in load_space("cpu", training=True).knobs}
    infer = {k.name for k in load_space("cpu", training=False).knobs}
    assert "freezing" not in train and "functorch.activation_memory_budget" in train
    assert "freezing" in infer and "functorch.activation_memory_budget" not in infer


def test_train_and_inference_workloads_have_different_keys() -> None:
    from tuner.workload import capture_workload, load_model_file

    train = train_workload()
    infer = capture_workload(load_model_file(MODELS / "tiny_mlp.py"))
    loaded = load_model_file(TRAIN)
    forward_only = capture_workload(loaded, call=lambda model: model(loaded.args[0]))
    assert train.key != forward_only.key
    assert not {g.key for g in train.graphs} & {g.key for g in forward_only.graphs}
    assert train.key != infer.key


@pytest.mark.slow
def test_a_compiled_step_with_wrong_gradients_is_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.measure import Rejected, prepare
    from tuner.trial import MeasureSpec, Status

    spec = MeasureSpec(str(TRAIN), mode="train")
    assert not isinstance(prepare(spec, ()), Rejected)
    monkeypatch.setenv("TINY_TRAIN_BREAK_GRAD", "1")
    torch._dynamo.reset()
    broken = prepare(spec, ())
    assert isinstance(broken, Rejected) and broken.status is Status.WRONG_RESULT
    assert broken.headline.startswith("training step: gradient of fc1.weight: RMS error"), broken.headline


def test_compare_steps_names_the_first_mismatching_parameter() -> None:
    from tuner.measure import compare_gradients
    from tuner.workload import compare_steps
    from tuner.workload.training import StepResult

    grads = (("a", torch.ones(3)), ("b", torch.ones(2)), ("frozen", None))
    ref = StepResult(torch.tensor(1.0), grads)
    assert compare_steps(ref, StepResult(torch.tensor(1.0), grads), compare_gradients) is None
    off = StepResult(torch.tensor(1.0), (grads[0], ("b", torch.tensor([1.0, 1.5])), grads[2]))
    assert compare_steps(ref, off, compare_gradients).startswith("gradient of b: norm-relative error 0.354")
    assert compare_steps(ref, StepResult(torch.tensor(1.1), grads), compare_gradients).startswith(
        "loss: norm-relative error")
    missing = StepResult(torch.tensor(1.0), (grads[0], ("b", None), grads[2]))
    assert compare_steps(ref, missing, compare_gradients) == "gradient of b: none, eager has one"


def test_train_mode_without_get_loss_names_the_fix(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    ran = run_main("search", str(MODELS / "tiny_mlp.py"), "--mode", "train", "--executor", "local",
                   env=cli_env(TUNER_DB=f"sqlite:///{db}"))
    assert ran.returncode == 1
    assert "does not define get_loss(), which --mode train needs; add `def get_loss(model, inputs):`" in ran.stderr
    assert not db.exists()


def test_precision_with_train_mode_is_a_usage_error() -> None:
    from tuner.errors import UsageError
    from tuner.search import SearchOptions
    from tuner.trial import MeasureSpec

    with pytest.raises(UsageError, match="--precision applies to inference only"):
        SearchOptions(MeasureSpec(str(TRAIN), mode="train", tolerance=1e-2), trials=1, precision=("fp32", "bf16"))


def test_shape_buckets_of_a_training_step_are_training_workloads_per_bucket() -> None:
    """--shapes with --mode train: each bucket's target is its training step at that size."""
    from tuner.search import SearchOptions, prepare_target
    from tuner.search.buckets import check_buckets
    from tuner.trial import MeasureSpec
    from tuner.workload import parse_shapes

    check_buckets(SearchOptions(MeasureSpec(str(TRAIN), mode="train"), trials=1), parse_shapes("batch=4,16"))
    four, sixteen = (prepare_target(str(TRAIN), mode="train", shape=(("batch", b),)) for b in (4, 16))
    assert (four.workload.name, sixteen.workload.name) == ("tiny_train[batch=4]", "tiny_train[batch=16]")
    assert sixteen.workload.key == train_workload().key != four.workload.key
    assert "freezing" not in {k.name for k in four.space.knobs}


def test_old_measure_spec_json_loads_as_inference() -> None:
    from tuner.trial import MeasureSpec

    data = MeasureSpec("m.py").to_json()
    del data["mode"]
    assert MeasureSpec.from_json(data).mode == "inference"


def test_explain_and_lookup_apply_the_stored_config_to_a_training_step(tmp_path: Path, monkeypatch) -> None:
    """A config stored for the training graphs reaches Inductor when `backend="tuner"` compiles a
    training step, and `tuner explain --mode train` names it; the inference graphs of the same
    model hold another config, which applies to neither."""
    import torch._inductor.compile_fx as cfx

    from tuner.lookup import reset_process_lookup
    from tuner.platform import current_platform
    from tuner.settings import Settings
    from tuner.storage import BestConfig, Store, upgrade
    from tuner.workload import capture_workload, load_model_file

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    platform = current_platform("cpu")
    loaded = load_model_file(TRAIN)
    infer = capture_workload(loaded, call=lambda model: model(loaded.args[0]))
    with Store.open(url) as store:
        store.ensure_platform(platform)
        for workload, size in ((train_workload(), 8), (infer, 16)):
            store.ensure_workload(workload)
            for graph in workload.graphs:
                store.save_best(BestConfig(
                    graph_key=graph.key, platform_key=platform.key, params={"max_fusion_size": size},
                    is_default=False, speedup=1.1, ci_low=1.05, ci_high=1.15, rounds=5, latency_ms=1.0,
                    baseline_ms=1.1, workload_key=workload.key, user="test", host="test", tuner_version="0.1.0",
                    torch_version=torch.__version__))
    explained = run_main("explain", str(TRAIN), "--mode", "train", env=cli_env(TUNER_DB=url))
    assert explained.returncode == 0 and "graph 0: exact hit" in explained.stdout, explained
    assert "max_fusion_size=8" in explained.stdout and "max_fusion_size=16" not in explained.stdout
    seen: list[int] = []
    original = cfx.compile_fx

    def probe(gm, example_inputs, *args, **kwargs):
        from torch._inductor import config

        if not kwargs.get("config_patches"):  # Inductor re-enters compile_fx with the patches applied
            seen.append(config.max_fusion_size)
        return original(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", probe)
    reset_process_lookup(replace(Settings.from_env({}), db_url=url))
    torch._dynamo.reset()
    try:
        model = load_model_file(TRAIN, seed=1).model
        compiled = torch.compile(model, backend="tuner")
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, target = torch.randn(16, 32), torch.randn(16, 1)
        torch.nn.functional.mse_loss(compiled(x), target).backward()
        optimizer.step()
        assert seen and set(seen) == {8}, seen
    finally:
        torch._dynamo.reset()
        reset_process_lookup()
