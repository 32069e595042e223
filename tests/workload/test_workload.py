"""Workload fingerprints: stable where the workload is the same, different where it is not.

Every test runs real Dynamo on tiny models with a backend that compiles nothing.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tuner.errors import ModelFileError
from tuner.keys import GraphFingerprint, Workload
from tuner.workload import capture, capture_workload, fingerprint_graph, load_model_file
from tuner.workload.modelfile import LoadedModel

MODELS = Path(__file__).resolve().parents[1] / "models"


def _compile_and_fingerprint(loaded: LoadedModel, calls: list[LoadedModel] | None = None,
                             dynamic: bool | None = None) -> list[GraphFingerprint]:
    """What the compile-time backend will do: fingerprint inside a backend of a normal compile."""
    seen: list[GraphFingerprint] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list):
        seen.append(fingerprint_graph(gm, example_inputs, index=len(seen)))
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = torch.compile(loaded.model, backend=backend, dynamic=dynamic)
        with torch.no_grad():
            for call in calls or [loaded]:
                call.call(compiled)
    finally:
        torch._dynamo.reset()
    return seen


def _with_batch(loaded: LoadedModel, batch: int) -> LoadedModel:
    x = loaded.args[0]
    return dataclasses.replace(loaded, args=(torch.randn(batch, *x.shape[1:], dtype=x.dtype),))


def test_capture_returns_fingerprints() -> None:
    loaded = load_model_file(MODELS / "mlp_a.py")
    w = capture_workload(loaded)
    assert isinstance(w, Workload) and w.name == "mlp_a" and len(w.key) == 32
    (g,) = w.graphs
    assert g.index == 0 and len(g.key) == 32 and g.num_nodes == g.code.count("\n")
    assert '"shape":[4,16]' in g.input_meta and "torch._C._nn.linear" in g.code
    assert "fc1" not in g.code and "L_x_" not in g.code  # no attribute or argument names
    assert capture_workload(loaded, name="other").key == w.key


def test_key_ignores_attribute_and_argument_names() -> None:
    a = capture_workload(load_model_file(MODELS / "mlp_a.py"))
    b = capture_workload(load_model_file(MODELS / "mlp_b.py"))
    assert a.key == b.key and a.graphs[0].code == b.graphs[0].code


def test_key_stable_in_another_process_directory_and_seed(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "model.py"
    copy.parent.mkdir()
    shutil.copy(MODELS / "mlp_a.py", copy)
    code = (
        "from tuner.workload import load_model_file\n"
        "from tuner.workload import capture_workload\n"
        f"print(capture_workload(load_model_file({str(copy)!r}, seed=7)).key)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == capture_workload(load_model_file(MODELS / "mlp_a.py", seed=0)).key


def test_key_changes_with_batch_dtype_grad_and_train_mode() -> None:
    loaded = load_model_file(MODELS / "mlp_a.py")
    base = capture_workload(loaded).key
    assert capture_workload(_with_batch(loaded, 5)).key != base
    as_double = dataclasses.replace(loaded, model=load_model_file(MODELS / "mlp_a.py").model.double(),
                                    args=(loaded.args[0].double(),))
    assert capture_workload(as_double).key != base
    assert capture_workload(loaded, grad=True).key != base

    bn = load_model_file(MODELS / "dropout_bn.py")
    eval_key = capture_workload(bn).key
    bn.model.train()
    assert capture_workload(bn).key != eval_key


def test_frozen_parameters_keep_the_inference_key_but_not_the_training_key() -> None:
    loaded = load_model_file(MODELS / "mlp_a.py")
    inference, training = capture_workload(loaded).key, capture_workload(loaded, grad=True).key
    loaded.model.requires_grad_(False)      # a common inference idiom: same compiled program under no_grad
    assert capture_workload(loaded).key == inference
    assert capture_workload(loaded, grad=True).key != training


def test_key_inside_a_real_backend_equals_capture() -> None:
    for name in ("mlp_a.py", "graph_break.py"):
        loaded = load_model_file(MODELS / name)
        captured = capture_workload(loaded)
        seen = _compile_and_fingerprint(loaded)
        assert [g.key for g in seen] == [g.key for g in captured.graphs]


def test_graph_break_gives_two_graphs() -> None:
    w = capture_workload(load_model_file(MODELS / "graph_break.py"))
    assert [g.index for g in w.graphs] == [0, 1]
    assert w.graphs[0].key != w.graphs[1].key


def test_dynamic_symbols_are_canonical() -> None:
    a = capture_workload(load_model_file(MODELS / "mlp_a.py"), dynamic=True)
    b = capture_workload(load_model_file(MODELS / "mlp_b.py"), dynamic=True)
    assert a.key == b.key
    code = a.graphs[0].code
    assert "T([s0,16]" in code and '"sym":"s0"' in a.graphs[0].input_meta
    assert a.key != capture_workload(load_model_file(MODELS / "mlp_a.py")).key
    # The symbolic graph is the same for every batch size.
    assert capture_workload(_with_batch(load_model_file(MODELS / "mlp_a.py"), 9), dynamic=True).key == a.key


def test_fingerprinting_adds_no_guards() -> None:
    """Automatic dynamic: static compile, then one symbolic compile, then no more.

    A fingerprint that specialised a SymInt (int(), ==) would force a compile per size.
    """
    loaded = load_model_file(MODELS / "mlp_a.py")
    seen = _compile_and_fingerprint(loaded, [_with_batch(loaded, n) for n in (4, 5, 6, 7)])
    assert len(seen) == 2
    assert "s0" not in seen[0].code and "T([s0,16]" in seen[1].code
    assert seen[0].key == capture_workload(loaded).graphs[0].key


def test_autocast_changes_key() -> None:
    loaded = load_model_file(MODELS / "mlp_a.py")
    base = _compile_and_fingerprint(loaded)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = _compile_and_fingerprint(loaded)[0]
    assert cast.key != base.key and "autocast[cpu]=bfloat16" in cast.code


def test_untraceable_model_is_a_model_file_error() -> None:
    with pytest.raises(ModelFileError) as info:
        capture_workload(load_model_file(MODELS / "bad_eager.py"))
    message = str(info.value)
    assert "\n" not in message and "torch.compile could not capture" in message and "TORCH_LOGS=" in message


def test_a_fingerprint_bug_is_not_blamed_on_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("bug in tuner")

    monkeypatch.setattr(capture, "fingerprint_graph", broken)
    with pytest.raises(ZeroDivisionError, match="bug in tuner"):
        capture_workload(load_model_file(MODELS / "mlp_a.py"))
