"""A `tuner.autotune` kernel inside `torch.compile` on CPU: one graph, no break, fullgraph works.

Dynamo cannot trace Triton under `TRITON_INTERPRET=1`, so the launch is one
`tuner::launch_kernel` op in the graph (`tuner.kernels.graph_op`); at run time the op
chooses the config as an eager launch does (database, search, hooks). Real torch.compile
with the default backend (Inductor), real SQLite; kernels defined with the interpreter on.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import tuner  # noqa: E402
from helpers import CountingBench  # noqa: E402
from tuner.kernels import KernelWarning, search_database  # noqa: E402
from tuner.storage import Store, kernel_configs  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def interpreted(sqlite_url: str) -> Iterator[str]:
    with triton.knobs.runtime.scope(), search_database(sqlite_url), warnings.catch_warnings():
        triton.knobs.runtime.interpret = True
        warnings.simplefilter("ignore", KernelWarning)
        torch._dynamo.reset()
        yield sqlite_url
    torch._dynamo.reset()


def make_scale_kernel(bench: CountingBench) -> Any:
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}, num_warps=1),
               triton.Config(kwargs={"BLOCK_SIZE": 64}, num_warps=2)]

    @tuner.autotune(configs=configs, key=["N", "DTYPE"], do_bench=bench)
    @triton.jit
    def scale_kernel(dst, src, bias, N, alpha, DTYPE: tl.constexpr, FLAG: tl.constexpr,
                     BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(src + offsets, mask=offsets < N) * alpha
        if FLAG:
            x = x + 1.0
        tl.store(dst + offsets, x.to(DTYPE), mask=offsets < N)

    return scale_kernel


def forward(kernel: Any) -> Any:
    def f(x: torch.Tensor) -> torch.Tensor:
        h = torch.sin(x)
        out = torch.empty_like(h)
        n = h.numel()
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](out, h, None, n, 0.5, tl.float32, FLAG=True)
        return out * 2
    return f


def expected(x: torch.Tensor) -> torch.Tensor:
    return (torch.sin(x) * 0.5 + 1.0) * 2


def test_explain_shows_one_graph_and_no_break(interpreted: str) -> None:
    bench = CountingBench()
    f = forward(make_scale_kernel(bench))
    x = torch.randn(100)
    explained = torch._dynamo.explain(f)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    (graph,) = explained.graphs
    assert "tuner.launch_kernel" in str(graph.code)


def test_fullgraph_with_the_default_backend_tunes_once_and_stores(interpreted: str) -> None:
    bench = CountingBench()
    kernel = make_scale_kernel(bench)
    compiled = torch.compile(forward(kernel), fullgraph=True)
    x = torch.randn(100)
    assert torch.allclose(compiled(x), expected(x))
    assert bench.calls == 2
    assert torch.allclose(compiled(x), expected(x)) and bench.calls == 2     # the same key: chosen
    y = torch.randn(300)
    assert torch.allclose(compiled(y), expected(y)) and bench.calls == 4     # another key: searched
    with Store.open(interpreted, readonly=True) as store:
        rows = kernel_configs(store)
    assert sorted(dict(r.key_args)["N"] for r in rows) == [100, 300]
    assert {dict(r.key_args)["DTYPE"] for r in rows} == {"dtype:fp32"}

    again = CountingBench()                     # a fresh kernel object: the database hits
    compiled = torch.compile(forward(make_scale_kernel(again)), fullgraph=True)
    assert torch.allclose(compiled(x), expected(x)) and again.calls == 0


def test_an_in_place_kernel_mutates_its_input_inside_the_graph(interpreted: str) -> None:
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 64})]

    @tuner.autotune(configs=configs, key=["N"], restore_value=["acc"], do_bench=CountingBench())
    @triton.jit
    def accumulate(acc, x, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        a = tl.load(acc + offsets, mask=offsets < N)
        tl.store(acc + offsets, a + tl.load(x + offsets, mask=offsets < N), mask=offsets < N)

    def step(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        n = acc.numel()
        accumulate[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](acc, x * 3, n)
        return acc.sum()

    acc, x = torch.zeros(200), torch.randn(200)
    total = torch.compile(step, fullgraph=True)(acc, x)
    assert torch.allclose(acc, x * 3) and torch.allclose(total, (x * 3).sum(), atol=1e-4)


def test_the_gpu_path_prunes_db_first_as_dynamo_traces_it(interpreted: str) -> None:
    """Where Dynamo's Triton support is on (a GPU), Dynamo traces the kernel's
    `early_config_prune` through `TritonHOPifier.do_prune_configs` and hands Inductor the
    configs it returns. The narrowest stand-in here: that same function, traced by Dynamo
    (fullgraph) with the launch's named arguments, as `triton_kernel_wrap` calls it."""
    from torch._higher_order_ops.triton_kernel_wrap import TritonHOPifier

    bench = CountingBench()
    kernel = make_scale_kernel(bench)

    def pruned(x: torch.Tensor, out: torch.Tensor, n: int) -> Any:
        named = {"dst": out, "src": x, "bias": None, "N": n, "alpha": 0.5, "DTYPE": tl.float32}
        got = TritonHOPifier.do_prune_configs(kernel, kernel.early_config_prune, kernel.perf_model,
                                              kernel.configs_top_k, kernel.configs, named, {"FLAG": True})
        return x + 1, [c.kwargs["BLOCK_SIZE"] for c in got]

    x, out = torch.randn(100), torch.empty(100)
    assert torch.compile(pruned, fullgraph=True, backend="eager")(x, out, 100)[1] == [32, 64]   # a miss: all
    forward(kernel)(x)                                          # an eager launch tunes and stores
    best = kernel.best_config.kwargs["BLOCK_SIZE"]
    torch._dynamo.reset()
    assert bench.calls == 2
    assert torch.compile(pruned, fullgraph=True, backend="eager")(x, out, 100)[1] == [best]    # a hit: alone
    torch._dynamo.reset()
    assert torch.compile(pruned, fullgraph=True, backend="eager")(x, out, 300)[1] == [32, 64]  # another key
    torch._dynamo.reset()
    symbolic = torch.compile(pruned, fullgraph=True, backend="eager", dynamic=True)
    assert symbolic(x, out, 100)[1] == [best]           # a symbolic key value is specialised
    assert symbolic(x, out, 300)[1] == [32, 64]
    kernel.nargs = {"N": 100}
    assert len(kernel.prune_configs({})) == 2           # outside a compile: the user's pruning only


def test_a_gpu_miss_of_an_in_place_kernel_hands_inductor_one_config(interpreted: str) -> None:
    """Dynamo rebuilds the pruned kernel without restore_value: on a miss, no benchmarking."""
    from torch._higher_order_ops.triton_kernel_wrap import TritonHOPifier

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 64})]

    @tuner.autotune(configs=configs, key=["N"], restore_value=["acc"])
    @triton.jit
    def accumulate(acc, x, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(acc + offsets, tl.load(acc + offsets) + tl.load(x + offsets))

    def pruned(acc: torch.Tensor, n: int) -> Any:
        got = TritonHOPifier.do_prune_configs(accumulate, accumulate.early_config_prune, None, 1.0,
                                              accumulate.configs, {"acc": acc, "x": acc, "N": n}, {})
        return acc + 1, [c.kwargs["BLOCK_SIZE"] for c in got]

    assert torch.compile(pruned, fullgraph=True, backend="eager")(torch.zeros(64), 64)[1] == [32]
