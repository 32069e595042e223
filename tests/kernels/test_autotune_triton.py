"""`tuner.autotune` as a drop-in for `@triton.autotune`: Triton's arguments, object and semantics.

Modelled on what Triton's own suite checks (python/test/unit/runtime/test_autotuner.py):
keyword order, restore_value, reset_to_zero with None, pre- and post-hooks, prune_configs_by
with a perf model and with early pruning, one config skipping benchmarks, dtype keys, the
object's attributes. Each kernel is written as a Triton user writes it; the only change from
`@triton.autotune` is the decorator's name. They are defined inside the tests with Triton's
interpreter on (`interpreted`), so each test gets fresh kernels, and every kernel declared
without `db=` uses the test's SQLite file (`tuner.kernels.search_database`). Where a test
counts benchmarks it passes Triton's own `do_bench=` argument.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tuner.errors import UsageError

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

import tuner  # noqa: E402
from helpers import CountingBench  # noqa: E402
from tuner.kernels import KernelWarning, search_database  # noqa: E402
from tuner.storage import Store, kernel_configs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def interpreted(sqlite_url: str) -> Iterator[str]:
    """Kernels defined meanwhile run in Triton's interpreter and store in the test's database."""
    with triton.knobs.runtime.scope(), search_database(sqlite_url), warnings.catch_warnings():
        triton.knobs.runtime.interpret = True
        warnings.simplefilter("ignore", KernelWarning)        # the interpreter's wall clock ranks nothing
        yield sqlite_url


def stored_rows(url: str) -> list[Any]:
    with Store.open(url, readonly=True) as store:
        return list(kernel_configs(store))


def test_keyword_order_never_changes_the_key(interpreted: str) -> None:
    N = 1024
    src = torch.randn(N)
    dst = torch.empty(N)
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]

    @tuner.autotune(configs=configs, key=["N"])
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(src + offsets, mask=offsets < N)
        tl.store(dst + offsets, x, mask=offsets < N)

    grid = lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)  # noqa: E731
    _kernel[grid](dst=dst, src=src, N=N)
    _kernel[grid](src=src, N=N, dst=dst)
    _kernel[grid](dst, src, N)
    assert torch.equal(dst, src)
    assert len(_kernel.cache) == 1 and len(_kernel.choices()) == 1
    assert len(stored_rows(interpreted)) == 1
    half = torch.randn(N).half()
    _kernel[grid](dst=half, src=src, N=N)        # fp16 dst, fp32 src
    _kernel[grid](src=half, dst=src, N=N)        # fp32 dst, fp16 src: another key
    assert len(_kernel.cache) == 3
    assert {r.dtypes for r in stored_rows(interpreted)} == {
        "dst=float32,src=float32", "dst=float16,src=float32", "dst=float32,src=float16"}


def test_restore_value_leaves_one_launch_of_an_in_place_kernel(interpreted: str) -> None:
    N = 1024
    src = torch.zeros(N)
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]

    @tuner.autotune(configs=configs, key=["N"], restore_value=["src"])
    @triton.jit
    def _kernel(src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(src + offsets, mask=offsets < N) + 1
        tl.store(src + offsets, x, mask=offsets < N)

    grid = lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)  # noqa: E731
    _kernel[grid](src, N)
    assert torch.equal(src, torch.ones(N))


def test_reset_to_zero_skips_an_argument_passed_none(interpreted: str) -> None:
    N = 512
    x = torch.randn(N)
    total = torch.zeros(N)
    bench = CountingBench()
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 64}), triton.Config(kwargs={"BLOCK_SIZE": 128})]

    @tuner.autotune(configs=configs, key=["N"], reset_to_zero=["total", "aux"], do_bench=bench)
    @triton.jit
    def _kernel(x, total, aux, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.atomic_add(total + offsets, tl.load(x + offsets, mask=offsets < N), mask=offsets < N)

    _kernel[lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)](x, total, None, N)
    assert bench.calls == 2 and torch.allclose(total, x)    # zeroed before each benchmark and after


def test_pre_and_post_hooks_get_the_named_arguments_and_the_exception(interpreted: str) -> None:
    N = 256
    src = torch.randn(N)
    dst = torch.empty(N)
    seen: list[tuple[str, Any]] = []

    def pre_hook(kwargs: dict[str, Any], reset_only: bool = False) -> None:
        seen.append(("pre", (sorted(k for k in kwargs if k in ("dst", "src", "N", "BLOCK_SIZE")), reset_only)))

    def post_hook(kwargs: dict[str, Any], exception: Any) -> None:
        seen.append(("post", None if exception is None else type(exception).__name__))

    def config_hook(kwargs: dict[str, Any]) -> None:
        seen.append(("config", kwargs["BLOCK_SIZE"]))

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 24}),          # tl.arange needs a power of 2
               triton.Config(kwargs={"BLOCK_SIZE": 64}, pre_hook=config_hook)]

    @tuner.autotune(configs=configs, key=["N"], pre_hook=pre_hook, post_hook=post_hook, do_bench=CountingBench())
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    _kernel[lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)](dst, src, N)
    names = (["BLOCK_SIZE", "N", "dst", "src"], False)
    assert seen[:2] == [("pre", names), ("post", seen[1][1])] and seen[1][1] is not None
    assert seen[2:] == [("config", 64), ("pre", names), ("post", None),
                        ("pre", (names[0], True)),             # the reset after the search
                        ("config", 64)]                        # the real launch: the config's hook only
    assert torch.equal(dst, src) and _kernel.best_config.kwargs == {"BLOCK_SIZE": 64}


def test_prune_configs_by_perf_model_and_top_k(interpreted: str) -> None:
    N = 512
    src = torch.randn(N)
    dst = torch.empty(N)
    modelled: list[int] = []
    bench = CountingBench()

    def perf_model(**kwargs: Any) -> float:
        modelled.append(kwargs["BLOCK_SIZE"])
        assert kwargs["N"] == N and kwargs["dst"] is dst
        return abs(kwargs["BLOCK_SIZE"] - 64)

    configs = [triton.Config(kwargs={"BLOCK_SIZE": b}) for b in (16, 32, 64, 128)]

    @tuner.autotune(configs=configs, key=["N"], prune_configs_by={"perf_model": perf_model, "top_k": 2},
                    do_bench=bench)
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    _kernel[lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)](dst, src, N)
    assert modelled == [16, 32, 64, 128] and bench.calls == 2
    (choice,) = _kernel.choices()
    assert [dict(t.config)["BLOCK_SIZE"] for t in choice.search.trials] == [64, 32]
    assert torch.equal(dst, src)


def test_early_config_prune_sees_the_named_arguments(interpreted: str) -> None:
    N = 512
    src = torch.randn(N)
    dst = torch.empty(N)
    calls: list[tuple[list[str], list[str]]] = []
    bench = CountingBench()

    def early_config_prune(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        calls.append((sorted(named_args), sorted(kwargs)))
        return [c for c in configs if c.kwargs["BLOCK_SIZE"] <= named_args["N"] // 8]

    configs = [triton.Config(kwargs={"BLOCK_SIZE": b}) for b in (32, 64, 128, 256)]

    @tuner.autotune(configs=configs, key=["N"], prune_configs_by={"early_config_prune": early_config_prune},
                    do_bench=bench)
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    _kernel[lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)](dst, src, N)
    assert calls == [(["N", "dst", "src"], ["grid", "warmup"])] and bench.calls == 2
    assert torch.equal(dst, src) and _kernel.best_config.kwargs["BLOCK_SIZE"] in (32, 64)


def test_one_config_after_pruning_launches_without_benchmarking(interpreted: str) -> None:
    N = 512
    src = torch.randn(N)
    dst = torch.empty(N)
    bench = CountingBench()
    configs = [triton.Config(kwargs={"BLOCK_SIZE": b}) for b in (32, 64)]

    @tuner.autotune(configs=configs, key=["N"], do_bench=bench,
                    prune_configs_by={"early_config_prune": lambda configs, named, **kw: configs[1:]})
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    @tuner.autotune(configs=[triton.Config(kwargs={"BLOCK_SIZE": 128})], key=["N"], do_bench=bench)
    @triton.jit
    def _single(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    for kernel, block in ((_kernel, 64), (_single, 128)):
        dst.zero_()
        kernel[lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)](dst, src, N)
        assert torch.equal(dst, src) and kernel.best_config.kwargs == {"BLOCK_SIZE": block}
        (choice,) = kernel.choices()
        assert (choice.origin, choice.stored, choice.configs_tried) == ("only", False, 0)
    assert bench.calls == 0
    assert not Path(interpreted.removeprefix("sqlite:///")).exists()      # nothing read or stored


def test_a_dtype_argument_is_a_key(interpreted: str) -> None:
    N = 256
    src = torch.randn(N)
    configs = [triton.Config(kwargs={"BLOCK_SIZE": b}) for b in (32, 64)]

    @tuner.autotune(configs=configs, key=["N", "DTYPE"])
    @triton.jit
    def _kernel(dst, src, N, DTYPE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(src + offsets, mask=offsets < N).to(DTYPE)
        tl.store(dst + offsets, x, mask=offsets < N)

    grid = lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)  # noqa: E731
    for dtype, torch_dtype in ((tl.float32, torch.float32), (tl.float16, torch.float16)):
        dst = torch.empty(N, dtype=torch_dtype)
        _kernel[grid](dst, src, N, dtype)
        assert torch.equal(dst, src.to(torch_dtype))
    assert len(_kernel.cache) == 2
    assert sorted(dict(r.key_args)["DTYPE"] for r in stored_rows(interpreted)) == ["dtype:fp16", "dtype:fp32"]


def test_the_object_is_tritons_autotuner(interpreted: str) -> None:
    N = 128
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}, num_warps=2, num_stages=1),
               triton.Config(kwargs={"BLOCK_SIZE": 64}, num_warps=4, maxnreg=128)]

    @tuner.autotune(configs, ["N"])                      # positionally, as Triton takes them
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    assert isinstance(_kernel, Autotuner)
    assert _kernel.configs == configs and all(isinstance(c, triton.Config) for c in _kernel.configs)
    assert _kernel.keys == ["N"] and _kernel.arg_names == ["dst", "src", "N", "BLOCK_SIZE"]
    assert _kernel.base_fn.__name__ == "_kernel" and _kernel.fn.arg_names == _kernel.arg_names
    assert _kernel.cache == {} and _kernel.best_config is None
    src, dst = torch.randn(N), torch.empty(N)
    _kernel[lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)](dst, src, N)
    ((key, config),) = _kernel.cache.items()
    assert key == (N, "torch.float32", "torch.float32") and config is _kernel.best_config
    assert isinstance(_kernel.best_config, triton.Config) and _kernel.best_config in configs
    (row,) = stored_rows(interpreted)
    assert row.config_dict() == {k: v for k, v in config.all_kwargs().items() if k != "ir_override"}


def test_under_and_over_triton_heuristics(interpreted: str) -> None:
    N = 200
    src, dst = torch.randn(N), torch.empty(N)
    configs = [triton.Config(kwargs={"BLOCK_SIZE": b}) for b in (32, 64)]

    @tuner.autotune(configs=configs, key=["N"])
    @triton.heuristics({"EVEN": lambda args: args["N"] % args["BLOCK_SIZE"] == 0})
    @triton.jit
    def _under(dst, src, N, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)

    @triton.heuristics({"SCALE": lambda args: 2.0})
    @tuner.autotune(configs=configs, key=["N"])
    @triton.jit
    def _over(dst, src, N, SCALE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N) * SCALE, mask=offsets < N)

    grid = lambda META: (triton.cdiv(N, META["BLOCK_SIZE"]),)  # noqa: E731
    _under[grid](dst, src, N)
    assert torch.equal(dst, src) and len(_under.cache) == 1
    _over[grid](dst, src, N)
    assert torch.equal(dst, src * 2) and len(_over.fn.cache) == 1


def test_mistakes_are_one_line_usage_errors(interpreted: str) -> None:
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        tl.store(dst + tl.arange(0, BLOCK_SIZE), tl.load(src + tl.arange(0, BLOCK_SIZE)))

    cases = [
        (lambda: tuner.autotune({"BLOCK_SIZE": [32, 64]}, key=["N"]), "write space="),
        (lambda: tuner.autotune(space=[triton.Config({"BLOCK_SIZE": 32})], key=["N"]), "write configs="),
        (lambda: tuner.autotune(configs=[{"BLOCK_SIZE": 32}], key=["N"]), "write triton.Config"),
        (lambda: tuner.autotune(configs=[triton.Config({"BLOCK": 32})], key=["N"]), "not a parameter"),
        (lambda: tuner.autotune(configs=[triton.Config({"BLOCK_SIZE": 32})], key="N"), "list of parameter names"),
        (lambda: tuner.autotune(configs=[triton.Config({"BLOCK_SIZE": 32})], key=["M"]), "key must list"),
        (lambda: tuner.autotune(configs=[], space={"BLOCK_SIZE": [32]}, key=["N"]), "not both"),
        (lambda: tuner.autotune(key=["N"]), "needs configs="),
        (lambda: tuner.autotune([triton.Config({"BLOCK_SIZE": 32})], ["N"], {"top": 1}), "fields are"),
        (lambda: tuner.autotune([triton.Config({"BLOCK_SIZE": 32})], ["N"], pre_hook=3), "must be a function"),
    ]
    for make, fix in cases:
        with pytest.raises(UsageError, match=fix) as caught:
            make()(_kernel)
        assert "\n" not in str(caught.value)
