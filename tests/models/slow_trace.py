"""A tiny model whose compile is slow and whose calls are not: its custom op's fake kernel,
which only tracing runs (Dynamo and AOTAutograd propagate fake tensors through it; eager and the
compiled model call the real kernel), sleeps SLOW_TRACE_S. For the adaptive compile cap's tests
(tuner.measure.compile_cap): every compile, the default one included, takes that long or more,
so this file turns off what would skip the tracing of a second compile in one process (the fake
tensor cache) or of a compile made before (the FX graph and AOTAutograd caches)."""
import time

import torch
import torch._dynamo.config
import torch._functorch.config
import torch._inductor.config
from torch import nn

SLOW_TRACE_S = 0.1      # per fake call; a compile makes several
torch._dynamo.config.fake_tensor_cache_enabled = False
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False


def _define() -> object:
    """The op, defined once per process (a trial loads this file afresh for each variant)."""
    namespace = torch.ops.tuner_tests if hasattr(torch.ops, "tuner_tests") else None
    if namespace is not None and hasattr(namespace, "slow_trace_scale"):
        return namespace.slow_trace_scale

    @torch.library.custom_op("tuner_tests::slow_trace_scale", mutates_args=())
    def slow_trace_scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0

    @slow_trace_scale.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLOW_TRACE_S)        # at trace time only
        return torch.empty_like(x)

    return slow_trace_scale


slow_trace_scale = _define()


class SlowTrace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(slow_trace_scale(self.linear(x)))


def get_model():
    return SlowTrace().eval()


def get_inputs():
    return (torch.randn(4, 16),)
