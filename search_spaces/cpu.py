"""The CPU search space: Inductor's C++ backend, as a literal table of knobs.

Order matters: a parent comes before its children (define-by-run order).
Defaults are torch 2.13's; `knobs.resolve` aligns them with the installed torch.
Triton-only knobs (coordinate descent, triton.*) live in `cuda.py`: they do nothing here.
"""
from __future__ import annotations

import itertools

from tuner.search_spaces.knobs import Knob

# Register blocks along M, N, K (Mr x Nr x Kr; fp32 AVX2 uses Kr=1, so Kc counts K elements).
_CACHE_BLOCKINGS = (None, "2,2,64", "4,1,128", "4,2,256", "8,1,32", "1,4,128")

KNOBS: tuple[Knob, ...] = (
    Knob("mode", "choice", "default", "mode",
         choices=("default", "max-autotune-no-cudagraphs"),
         description="torch.compile mode preset, expanded into config patches"),
    Knob("freezing", "bool", False, "trace", scope="inference",
         description="treat parameters as constants (Dynamo prepare_freezing at trace time)"),
    # fusion
    Knob("epilogue_fusion", "bool", True, "fusion", description="fuse pointwise ops into GEMM templates"),
    Knob("max_fusion_size", "int", 64, "fusion", low=4, high=512, log=True,
         description="most nodes in one fused kernel"),
    Knob("aggressive_fusion", "bool", False, "fusion", description="fuse even without common reads"),
    Knob("pattern_matcher", "bool", True, "fusion", description="Inductor's FX pattern rewrites"),
    Knob("loop_ordering_after_fusion", "bool", True, "fusion",
         description="reorder loops after fusion to fuse more"),
    Knob("score_fusion_memory_threshold", "int", 10, "fusion", low=1, high=1000, log=True,
         description="shared bytes below which a fusion scores as not worth it"),
    Knob("cpp.max_horizontal_fusion_size", "int", 16, "fusion", low=1, high=128, log=True,
         description="most nodes in one horizontal fusion"),
    # tiling and codegen
    Knob("cpp.enable_tiling_heuristics", "bool", True, "tiling",
         description="heuristics that choose 2-D tiling"),
    Knob("split_reductions", "bool", True, "tiling", description="split large reductions in two"),
    Knob("cpp.min_chunk_size", "int", 512, "codegen", low=32, high=16384, log=True,
         description="smallest chunk of work per thread"),
    Knob("cpp.enable_loop_tail_vec", "bool", True, "codegen",
         description="masked vectorisation of loop tails"),
    Knob("cpp.dynamic_threads", "bool", False, "codegen",
         description="do not specialise kernels on the thread count"),
    # layout and memory
    Knob("layout_optimization", "bool", True, "layout", description="channels-last for convolutions"),
    # cpp.weight_prepack is left out on purpose: its effect is decided once per process. Inductor
    # registers the weight-pack patterns at the first frozen compile of a process, only if the knob
    # is on then (fx_passes/freezing_patterns.lazy_init, init-once), so a later graph gets packing or
    # not whatever its own config says. Measured here: a ResNet-18 config with it off ran at 17 ms
    # compiled alone, and at 10.6 ms compiled after a config with it on in the same process.
    # Neither a trial nor lookup could apply it per graph.
    Knob("cpp.enable_concat_linear", "bool", False, "layout", parent=("freezing", True), scope="inference",
         description="concatenate linears that share an input"),
    Knob("memory_planning", "bool", False, "memory", description="pooled allocations for intermediates"),
    Knob("reorder_for_locality", "bool", True, "memory", description="reorder nodes for data locality"),
    Knob("reorder_for_peak_memory", "bool", True, "memory", description="reorder nodes to lower peak memory"),
    Knob("functorch.activation_memory_budget", "float", 1.0, "memory", low=0.1, high=1.0, step=0.1,
         scope="training", description="share of activations kept for backward (rest recomputed)"),
    # autotuning and the C++ GEMM template
    Knob("max_autotune", "bool", False, "autotune",
         description="benchmark GEMM choices (mkldnn/ATen against the C++ template)"),
    # "CPP" alone fails with NoValidChoicesError wherever the C++ template does not apply
    # (e.g. unfrozen weights), and TRITON means nothing on CPU: so only "with or without CPP".
    Knob("max_autotune_gemm_backends", "choice", "ATEN,TRITON,CPP", "autotune",
         choices=("ATEN,TRITON,CPP", "ATEN"), parent=("max_autotune", True),
         description="GEMM backends max_autotune chooses from (ATEN: no C++ template)"),
    Knob("cpp.gemm_max_k_slices", "choice", 1, "gemm", choices=(1, 2, 4, 0), parent=("max_autotune", True),
         description="most K-slices of a C++ GEMM (0: unlimited)"),
    Knob("cpp.gemm_cache_blocking", "choice", None, "gemm", choices=_CACHE_BLOCKINGS,
         parent=("max_autotune", True), pattern=r"[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*",
         description="C++ GEMM cache blocking Mc,Nc,Kc in register blocks"),
    Knob("cpp.gemm_thread_factors", "choice", None, "gemm", choices=(None,),
         parent=("max_autotune", True), pattern=r"[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*",
         description="C++ GEMM thread split M,N,K; product must equal the thread count "
                     "(choices are filled in for the thread count by load_space)"),
    Knob("cpp.enable_grouped_gemm_template", "bool", False, "gemm", parent=("max_autotune", True),
         description="grouped GEMM template for linears sharing an input"),
    # wrapper
    Knob("cpp_wrapper", "bool", False, "wrapper", description="C++ wrapper instead of Python"),
    # numerics-changing: only with include_unsafe
    Knob("cpp.simdlen", "choice", None, "codegen", choices=(None, 128, 256, 512), unsafe=True,
         description="vector width; changes rounding, unsupported widths fall back to scalar"),
    Knob("cpp.enable_unsafe_math_opt_flag", "bool", False, "codegen", unsafe=True,
         description="compile kernels with unsafe math optimisations"),
    Knob("cpp.enable_floating_point_contract_flag", "choice", "off", "codegen",
         choices=("off", "on", "fast"), unsafe=True, description="-ffp-contract (FMA contraction)"),
    Knob("cpp.use_decompose_tanh", "bool", False, "codegen", unsafe=True,
         description="decomposed tanh (different rounding)"),
)

THREAD_FACTORS_KNOB = "cpp.gemm_thread_factors"
MAX_THREAD_FACTORS = 8


def thread_factor_choices(threads: int) -> tuple[str, ...]:
    """Splits "M,N,K" of `threads` for the C++ GEMM template, most balanced first.

    Inductor asserts that the product equals the thread count, so the choices depend on
    it; at most MAX_THREAD_FACTORS are proposed, preferring no K split.
    """
    found = []
    for m, n in itertools.product(range(1, threads + 1), repeat=2):
        if threads % (m * n) == 0:
            k = threads // (m * n)
            found.append((k, max(m, n, k) / min(m, n, k), (m, n, k)))
    found.sort()
    return tuple(",".join(map(str, f[2])) for f in found[:MAX_THREAD_FACTORS])
