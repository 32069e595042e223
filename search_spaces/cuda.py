"""The CUDA search space: Inductor's Triton backend, as a literal table of knobs.

Order matters: a parent comes before its children (define-by-run order).
Defaults are torch 2.13's; `knobs.resolve` aligns them with the installed torch.
Read from the source, not measured on a GPU here; a knob that fails to compile on some
GPU becomes a recorded COMPILE_ERROR trial, never a crash of the search.
"""
from __future__ import annotations

from tuner.search_spaces.knobs import Knob

KNOBS: tuple[Knob, ...] = (
    Knob("mode", "choice", "default", "mode",
         choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
         description="torch.compile mode preset, expanded into config patches"),
    Knob("freezing", "bool", False, "trace", scope="inference",
         description="treat parameters as constants (Dynamo prepare_freezing at trace time)"),
    # fusion
    Knob("epilogue_fusion", "bool", True, "fusion", description="fuse pointwise ops into GEMM templates"),
    Knob("prologue_fusion", "bool", True, "fusion", description="fuse pointwise ops into template inputs"),
    Knob("max_fusion_size", "int", 64, "fusion", low=4, high=512, log=True,
         description="most nodes in one fused kernel"),
    Knob("aggressive_fusion", "bool", False, "fusion", description="fuse even without common reads"),
    Knob("pattern_matcher", "bool", True, "fusion", description="Inductor's FX pattern rewrites"),
    Knob("loop_ordering_after_fusion", "bool", True, "fusion",
         description="reorder loops after fusion to fuse more"),
    Knob("score_fusion_memory_threshold", "int", 10, "fusion", low=1, high=1000, log=True,
         description="shared bytes below which a fusion scores as not worth it"),
    Knob("benchmark_fusion", "bool", False, "fusion", description="benchmark fusion decisions"),
    Knob("combo_kernels", "bool", False, "fusion", description="combine independent kernels into one"),
    # tiling and codegen
    Knob("split_reductions", "bool", True, "tiling", description="split large reductions in two"),
    Knob("triton.max_tiles", "choice", None, "tiling", choices=(None, 1, 2, 3),
         description="most tiling dimensions (None: 3 with coalesce analysis, else 2)"),
    Knob("triton.prefer_nd_tiling", "bool", False, "tiling", description="prefer higher-dimensional tilings"),
    Knob("triton.tile_reductions", "bool", False, "tiling", description="tile reductions in several dims"),
    Knob("triton.coalesce_tiling_analysis", "bool", True, "tiling",
         description="choose tilings by coalescing analysis"),
    Knob("triton.tiling_prevents_pointwise_fusion", "bool", True, "tiling",
         description="do not fuse pointwise nodes of different tiling"),
    Knob("triton.tiling_prevents_reduction_fusion", "bool", True, "tiling",
         description="do not fuse reductions of different tiling"),
    Knob("triton.persistent_reductions", "bool", True, "tiling",
         description="persistent kernels for small reductions"),
    Knob("triton.cooperative_reductions", "bool", False, "tiling",
         description="cross-block reductions for small outputs"),
    Knob("triton.mix_order_reduction", "bool", True, "tiling",
         description="fuse reductions of mixed loop order"),
    Knob("triton.multi_kernel", "choice", 0, "codegen", choices=(0, 1),
         description="emit persistent and non-persistent reductions and pick at run time"),
    Knob("unroll_reductions_threshold", "int", 8, "codegen", low=1, high=64, log=True,
         description="unroll reductions up to this size"),
    Knob("triton.use_block_ptr", "bool", False, "codegen", description="tl.make_block_ptr loads/stores"),
    Knob("triton.autotune_pointwise", "bool", True, "codegen",
         description="autotune pointwise kernels with complex layouts"),
    Knob("max_autotune_pointwise", "bool", False, "codegen", description="autotune all pointwise kernels"),
    # layout and memory
    Knob("layout_optimization", "bool", True, "layout", description="channels-last for convolutions"),
    Knob("shape_padding", "bool", True, "layout", description="pad matmul inputs for tensor cores"),
    Knob("comprehensive_padding", "bool", True, "layout", description="pad strides of all tensors"),
    Knob("memory_planning", "bool", False, "memory", description="pooled allocations for intermediates"),
    Knob("reorder_for_locality", "bool", True, "memory", description="reorder nodes for data locality"),
    Knob("reorder_for_peak_memory", "bool", True, "memory", description="reorder nodes to lower peak memory"),
    Knob("functorch.activation_memory_budget", "float", 1.0, "memory", low=0.1, high=1.0, step=0.1,
         scope="training", description="share of activations kept for backward (rest recomputed)"),
    # autotuning
    Knob("max_autotune", "bool", False, "autotune", description="autotune templates and kernel configs"),
    # CPP means nothing on CUDA, so "ATEN,TRITON" would compile like the default. "TRITON" alone
    # raises NoValidChoicesError where no Triton template fits: a recorded COMPILE_ERROR trial.
    Knob("max_autotune_gemm_backends", "choice", "ATEN,TRITON,CPP", "gemm",
         choices=("ATEN,TRITON,CPP", "TRITON", "ATEN"), parent=("max_autotune", True),
         description="GEMM backends max_autotune chooses from"),
    Knob("max_autotune_gemm_search_space", "choice", "DEFAULT", "gemm", choices=("DEFAULT", "EXHAUSTIVE"),
         parent=("max_autotune", True), description="how many GEMM template configs to try"),
    Knob("triton.enable_persistent_tma_matmul", "bool", False, "gemm", parent=("max_autotune", True),
         description="persistent TMA matmul templates (Hopper and newer)"),
    Knob("max_autotune_gemm", "bool", False, "autotune", description="autotune GEMM templates only"),
    Knob("coordinate_descent_tuning", "bool", False, "autotune",
         description="coordinate descent over Triton kernel configs"),
    Knob("coordinate_descent_search_radius", "int", 1, "autotune", low=1, high=4,
         parent=("coordinate_descent_tuning", True), description="neighbourhood radius of the descent"),
    Knob("coordinate_descent_check_all_directions", "bool", False, "autotune",
         parent=("coordinate_descent_tuning", True), description="try every direction at each step"),
    # wrapper
    Knob("triton.cudagraphs", "bool", False, "wrapper", description="CUDA graphs around the compiled graph"),
    Knob("cpp_wrapper", "bool", False, "wrapper", description="C++ wrapper instead of Python"),
    # numerics-changing or unchecked assumptions: only with include_unsafe
    Knob("use_fast_math", "bool", False, "codegen", unsafe=True, description="ftz exp in Triton"),
    Knob("triton.codegen_upcast_to_fp32", "bool", True, "codegen", unsafe=True,
         description="upcast fp16/bf16 to fp32 inside kernels (False changes numerics)"),
    Knob("assume_32bit_indexing", "bool", False, "codegen", unsafe=True,
         description="always use 32-bit indices (wrong for huge tensors)"),
)
