"""Model files: loading, determinism, eager reference, output flattening, and every mistake."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tuner.errors import ModelFileError
from tuner.workload import eager_reference, flatten_outputs, load_model_file
from tuner.workload.modelfile import LoadedModel

MODELS = Path(__file__).resolve().parents[1] / "models"


def _param_sum(loaded: LoadedModel) -> float:
    return float(sum(p.detach().double().sum() for p in loaded.model.parameters()))


def test_load_gives_model_inputs_and_device() -> None:
    loaded = load_model_file(MODELS / "mlp_a.py")
    assert isinstance(loaded.model, torch.nn.Module)
    assert loaded.device == "cpu" and loaded.kwargs == {} and loaded.path == (MODELS / "mlp_a.py").resolve()
    assert loaded.args[0].shape == (4, 16)
    assert loaded.call().shape == (4, 8)
    assert loaded.call(lambda x: x * 0).shape == (4, 16)


def test_module_stays_only_under_its_own_unique_name() -> None:
    before = set(sys.modules)
    load_model_file(MODELS / "mlp_a.py")
    new = [m for m in set(sys.modules) - before if "modelfile" in m or "mlp_a" in m]
    assert len(new) == 1 and new[0].startswith("_tuner_modelfile_"), new


def test_a_model_class_defined_in_the_file_compiles(tmp_path) -> None:
    """Dynamo imports a class's __module__ to resolve the globals of an inlined forward: a file
    whose blocks sit in an nn.Sequential and read a module-level global failed every compile."""
    import torch

    path = tmp_path / "blocks.py"
    path.write_text(
        "import torch\nfrom torch import nn\nSCALE = 2.0\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(8, 8)\n"
        "    def forward(self, x):\n        return torch.relu(self.lin(x)) * SCALE\n"
        "def get_model():\n    return nn.Sequential(Block(), Block()).eval()\n"
        "def get_inputs():\n    return (torch.randn(2, 8),)\n")
    loaded = load_model_file(path)
    torch._dynamo.reset()
    with torch.no_grad():
        out = loaded.call(torch.compile(loaded.model, backend="eager"))
    torch.testing.assert_close(out, loaded.call())


def test_same_seed_same_weights_and_inputs_other_seed_differs() -> None:
    a, b = load_model_file(MODELS / "mlp_a.py"), load_model_file(MODELS / "mlp_a.py")
    c = load_model_file(MODELS / "mlp_a.py", seed=1)
    assert _param_sum(a) == _param_sum(b) and torch.equal(a.args[0], b.args[0])
    assert _param_sum(a) != _param_sum(c) and not torch.equal(a.args[0], c.args[0])


def test_same_seed_same_weights_in_another_process() -> None:
    code = (
        "from tuner.workload import load_model_file\n"
        f"l = load_model_file({str(MODELS / 'mlp_a.py')!r})\n"
        "print(repr(float(sum(p.detach().double().sum() for p in l.model.parameters()))), repr(float(l.args[0].double().sum())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    loaded = load_model_file(MODELS / "mlp_a.py")
    assert out.split() == [repr(_param_sum(loaded)), repr(float(loaded.args[0].double().sum()))]


def test_keyword_inputs_and_nested_outputs() -> None:
    loaded = load_model_file(MODELS / "kwargs_model.py")
    assert loaded.args == () and set(loaded.kwargs) == {"x", "scale"}
    out = eager_reference(loaded)
    flat = flatten_outputs(out)
    assert [t.shape for t in flat] == [(3, 4), (), ()]
    assert torch.equal(flat[0], out["out"]) and torch.equal(flat[2], out["extra"][2][0])


def test_flatten_outputs_orders_dataclasses_and_skips_non_tensors() -> None:
    from dataclasses import dataclass

    @dataclass
    class Out:
        logits: torch.Tensor
        loss: torch.Tensor | None
        note: str

    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    flat = flatten_outputs((Out(a, None, "x"), {"z": b, "a": [c, 1.5]}))
    assert [t.shape for t in flat] == [(1,), (2,), (3,)]
    assert flatten_outputs(a)[0] is a


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("does_not_exist.py", ["not found", "pass the path of a Python file that defines get_model() and get_inputs()"]),
        ("bad_syntax.py", ["bad_syntax.py:5", "syntax error", "fix the syntax"]),
        ("bad_no_get_model.py", ["does not define get_model()", "add `def get_model():`"]),
        ("bad_no_get_inputs.py", ["does not define get_inputs()", "add `def get_inputs():`"]),
        ("bad_model_not_module.py", ["returned the class Net, not an instance", "`return Net().eval()`"]),
        ("bad_inputs_tensor.py", ["returned a single Tensor", "wrap it in a tuple"]),
        ("bad_inputs_element.py", ["element 1 is 3 (int), not a tensor", "return a tuple of tensors"]),
        ("bad_import_raises.py", ["failed while importing", "bad_import_raises.py:4",
                                  "No module named 'not_a_real_module_for_tuner_tests'", "fix the error"]),
        ("bad_get_model_raises.py", ["get_model() in", "raised at", "ValueError: (got 3)", "fix get_model() so that it runs"]),
    ],
)
def test_bad_model_file_raises_one_line_with_the_fix(name: str, expected: list[str]) -> None:
    with pytest.raises(ModelFileError) as info:
        load_model_file(MODELS / name)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_device_this_machine_lacks() -> None:
    with pytest.raises(ModelFileError) as info:
        load_model_file(MODELS / "bad_cuda.py")
    message = str(info.value)
    assert "\n" not in message
    assert "DEVICE='cuda' but no CUDA device is available; set DEVICE='cpu'" in message


def test_model_that_fails_in_eager_mode() -> None:
    loaded = load_model_file(MODELS / "bad_eager.py")
    with pytest.raises(ModelFileError) as info:
        eager_reference(loaded)
    message = str(info.value)
    assert "\n" not in message
    assert "fails in eager mode" in message and "mat1 and mat2 shapes cannot be multiplied" in message
    assert "fix the model so that get_model()(*get_inputs()) runs" in message


def test_eager_reference_runs_without_grad() -> None:
    out = eager_reference(load_model_file(MODELS / "mlp_a.py"))
    assert out.shape == (4, 8) and not out.requires_grad
