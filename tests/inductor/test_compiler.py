"""compile_config / make_backend / trace_context / compile_model on a tiny model with real torch.compile."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch._functorch.config as functorch_config
import torch._inductor.compile_fx as inductor_compile_fx
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code

from tuner.errors import SpaceError, UsageError
from tuner.inductor import CompileConfig, compile_config, compile_model, make_backend
from tuner.inductor.compiler import inductor_patches, trace_context
from tuner.search_spaces import Knob, catalogue, load_space

MAX = "max-autotune-no-cudagraphs"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).eval()
    return model, torch.randn(4, 16)


# -- compile_config (no compiling) ---------------------------------------------

def test_mode_is_expanded_and_knobs_layered_on_top():
    config = compile_config({"mode": MAX, "max_fusion_size": 16, "coordinate_descent_tuning": True,
                             "functorch.activation_memory_budget": 0.5, "freezing": True})
    assert dict(config.inductor) == {"max_autotune": True, "coordinate_descent_tuning": True, "max_fusion_size": 16}
    assert config.functorch == (("activation_memory_budget", 0.5),)
    assert config.freezing and config.mode == MAX and not config.is_default


def test_a_knob_at_its_default_never_overrides_the_mode():
    assert compile_config({"mode": MAX, "max_autotune": False}) == compile_config({"mode": MAX})
    assert compile_config({"max_fusion_size": 64, "freezing": False, "mode": "default"}) == CompileConfig()
    assert compile_config({}).is_default


def test_candidate_and_full_params_compile_the_same():
    space = load_space("cpu", threads=2)
    full = space.complete({"mode": MAX, "cpp.gemm_max_k_slices": 0, "epilogue_fusion": False})
    assert compile_config(full) == compile_config(space.candidate(full).as_dict())


def test_compile_config_rejects_what_the_allow_list_or_this_torch_lacks(monkeypatch):
    with pytest.raises(SpaceError, match="unknown knob 'cpp.cxx'"):
        compile_config({"cpp.cxx": "g++"})
    with pytest.raises(SpaceError, match="is not a bool"):
        compile_config({"cpp_wrapper": "yes"})
    monkeypatch.setitem(catalogue.ALLOWED, "gone_in_this_torch", Knob("gone_in_this_torch", "bool", False, "fusion"))
    with pytest.raises(SpaceError, match=r"gone_in_this_torch do not exist in torch .*re-run the search"):
        compile_config({"gone_in_this_torch": True})


def test_user_patches_sit_under_the_stored_config():
    config = compile_config({"max_fusion_size": 16, "freezing": True})
    merged = inductor_patches(config, user_patches={"max_fusion_size": 8, "epilogue_fusion": False})
    assert merged == {"max_fusion_size": 16, "epilogue_fusion": False, "freezing": True}


# -- real compiles -------------------------------------------------------------

def test_patches_are_in_effect_at_compile_time_and_global_config_untouched(monkeypatch, tiny):
    model, x = tiny
    seen = []
    original = inductor_compile_fx.compile_fx

    def probe_inner(gm, example_inputs, **kwargs):
        seen.append((inductor_config.max_fusion_size, inductor_config.epilogue_fusion,
                     functorch_config.activation_memory_budget))
        return inductor_compile_fx.compile_fx_inner(gm, example_inputs, **kwargs)

    def spy(gm, example_inputs, **kwargs):
        kwargs.setdefault("inner_compile", probe_inner)
        return original(gm, example_inputs, **kwargs)

    monkeypatch.setattr(inductor_compile_fx, "compile_fx", spy)
    config = compile_config({"max_fusion_size": 8, "functorch.activation_memory_budget": 0.5})
    # options= (as torch.compile passes them to a backend) and user_patches both sit under the config
    backend = make_backend(config, user_patches={"max_fusion_size": 32})
    compiled = torch.compile(model, backend=backend, options={"epilogue_fusion": False, "max_fusion_size": 2})
    # a cache hit (AOTAutograd or FX graph cache) would skip the inner compile the probe watches
    with torch.no_grad(), torch.compiler.config.patch(force_disable_caches=True):
        out = compiled(x)
        torch.testing.assert_close(out, model(x))
    assert seen == [(8, False, 0.5)]
    assert (inductor_config.max_fusion_size, inductor_config.epilogue_fusion) == (64, True)
    assert functorch_config.activation_memory_budget == 1.0


def test_compile_model_matches_eager_and_does_not_freeze_by_default(tiny):
    model, x = tiny
    compiled = compile_model(model, compile_config({"epilogue_fusion": False, "max_fusion_size": 4}))
    with torch.no_grad():
        out, codes = run_and_get_code(compiled, x)
        torch.testing.assert_close(out, model(x))
        torch.testing.assert_close(compiled(x + 1), model(x + 1))
    assert codes and "_frozen_param" not in "\n".join(codes)


def test_freezing_turns_weights_into_constants(tiny):
    model, x = tiny
    config = compile_config({"freezing": True})
    compiled = compile_model(model, config)
    with torch.no_grad():
        out, codes = run_and_get_code(compiled, x)
        torch.testing.assert_close(out, model(x))
        torch.testing.assert_close(compiled(x * 2), model(x * 2))
        bigger = torch.randn(8, 16)   # a new shape retraces outside trace_context: unfrozen but correct
        torch.testing.assert_close(compiled(bigger), model(bigger))
    code = "\n".join(codes)
    assert "_frozen_param" in code   # parameters became constants Inductor folded


def test_freezing_refuses_grad_mode(tiny):
    model, x = tiny
    compiled = compile_model(model, compile_config({"freezing": True}))
    with pytest.raises(UsageError, match="inference only"):
        compiled(x)
    with trace_context(CompileConfig()):   # without freezing it does nothing, grad or not
        assert torch.is_grad_enabled()


def test_the_compiled_model_behaves_like_the_users_module(tiny):
    """What a model file's get_loss receives: attributes, methods, submodules and writes as through
    torch.compile's own OptimizedModule (a Hugging Face model's `config` included)."""
    from types import SimpleNamespace

    model, x = tiny
    model.config = SimpleNamespace(vocab_size=32)
    for params in ({}, {"freezing": True}):
        compiled = compile_model(model, compile_config(params))
        assert isinstance(compiled, torch.nn.Module) and compiled.config.vocab_size == 32
        assert compiled.train() is compiled and model.training and compiled.training
        compiled.eval()
        assert not model.training
        assert [p.data_ptr() for p in compiled.parameters()] == [p.data_ptr() for p in model.parameters()]
        assert getattr(compiled, "0") is model[0] and set(compiled.state_dict()) == {f"_orig_mod.{k}" for k in model.state_dict()}
        compiled.marker = 7                      # a write reaches the user's module, as through torch.compile
        assert model.marker == 7
        del compiled.marker
        assert not hasattr(model, "marker")


def test_freezing_checks_each_first_call_until_one_passes(tiny):
    model, x = tiny
    compiled = compile_model(model, compile_config({"freezing": True}))
    with pytest.raises(UsageError, match="inference only"):
        compiled(x)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert not compiled._forward_pre_hooks          # the check removed itself
