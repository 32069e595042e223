"""Our adapter to Inductor: what we hand it, and what we take from its autotuning.

`compile_config` turns stored knob values into a `CompileConfig` (Inductor and functorch config
patches, freezing, precision), checked against the installed torch; `make_backend` and
`compile_model` compile with it, the one compile implementation that trials, the confirmation and
the lookup share, so what was measured is what the lookup applies. `gemm_choices` owns Inductor's
two GEMM autotuning hooks and `triton_choices` the tile configs of its generated Triton kernels:
each harvests where a config is measured and feeds the winners back at lookup. Inside the
package, `freezing` binds a graph's weights as constants inside the backend (`FrozenGraph`) and
`precision` applies a precision mode to each graph, for trials and lookup alike.
torch loads inside the functions that compile.
"""
from tuner.inductor import gemm_choices, triton_choices
from tuner.inductor.compiler import CompileConfig, compile_config, compile_model, make_backend

__all__ = [
    "CompileConfig",
    "compile_config",
    "compile_model",
    "gemm_choices",
    "make_backend",
    "triton_choices",
]
