"""What the compile-time lookup adds per graph, next to what compiling that graph costs.

    python bench/lookup_overhead.py [--repeat 20]

For each graph of a few small models it times, as `backend="tuner"` runs them:
  hit     fingerprint + platform + query + re-validation, not cached (the store is open:
          every graph after a process's first one pays this);
  miss    the same against a database without the graph;
  cached  a graph this process already decided (fingerprint + dictionary lookup);
and prints them beside the graph's compile time with `backend="inductor"` (Inductor's
caches off, so it is a real compile). Once per process the lookup also imports the storage
layer and opens the database, and the platform is probed; those are printed separately
(Inductor probes the vector ISA for its own compile too, so that part moves rather than adds).
Numbers are medians over --repeat runs. Everything uses a temporary SQLite file.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def models() -> list[tuple[str, Any, tuple]]:
    import torch
    from torch import nn

    class Block(nn.Module):
        """A GPT-style block: attention and MLP, each behind a LayerNorm and a residual."""

        def __init__(self, d: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()
    blocks = nn.Sequential(*[Block() for _ in range(4)]).eval()
    return [("tiny_mlp", mlp, (torch.randn(8, 32),)),
            ("4_gpt_blocks", blocks, (torch.randn(2, 32, 64),))]


def capture(model: Any, inputs: tuple) -> list[tuple[Any, list]]:
    """The (graph, example inputs) pairs Dynamo hands a backend for `model(*inputs)`."""
    import torch

    graphs: list[tuple[Any, list]] = []

    def record(gm: Any, example_inputs: list) -> Callable:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=record)(*inputs)
    torch._dynamo.reset()
    return graphs


def compile_seconds(model: Any, inputs: tuple) -> float:
    import torch

    torch._dynamo.reset()
    start = time.perf_counter()
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        torch.compile(model, backend="inductor")(*inputs)
    seconds = time.perf_counter() - start
    torch._dynamo.reset()
    return seconds


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    import torch  # noqa: F401  (timed apart from tuner's own imports)
    torch_s = time.perf_counter() - start

    start = time.perf_counter()
    from tuner.lookup import Lookup
    from tuner.platform import current_platform
    from tuner.settings import Settings
    from tuner.workload import fingerprint_graph
    tuner_import_ms = (time.perf_counter() - start) * 1000

    start = time.perf_counter()
    platform = current_platform("cpu")
    platform_ms = (time.perf_counter() - start) * 1000

    start = time.perf_counter()
    from tuner.storage import BestConfig, Store
    storage_import_ms = (time.perf_counter() - start) * 1000

    work = [(name, model, inputs, capture(model, inputs)) for name, model, inputs in models()]

    with tempfile.TemporaryDirectory() as tmp:
        from tuner.storage import upgrade

        hit_url, miss_url = f"sqlite:///{Path(tmp) / 'hit.db'}", f"sqlite:///{Path(tmp) / 'miss.db'}"
        upgrade(hit_url)
        upgrade(miss_url)
        with Store.open(hit_url) as store:
            store.ensure_platform(platform)
            for _, _, _, graphs in work:
                for gm, example_inputs in graphs:
                    key = fingerprint_graph(gm, example_inputs).key
                    store.save_best(BestConfig(graph_key=key, platform_key=platform.key,
                                               params={"max_fusion_size": 8}, is_default=False, speedup=1.1,
                                               ci_low=1.05, ci_high=1.15, rounds=5, latency_ms=1.0,
                                               baseline_ms=1.1))

        hit_lookup, miss_lookup = Lookup(Settings(db_url=hit_url)), Lookup(Settings(db_url=miss_url))
        start = time.perf_counter()
        hit_lookup.store()
        open_ms = (time.perf_counter() - start) * 1000
        miss_lookup.store()

        first_gm, first_inputs = work[0][3][0]
        start = time.perf_counter()
        hit_lookup.decide_graph(first_gm, first_inputs)
        first_query_ms = (time.perf_counter() - start) * 1000
        miss_lookup.decide_graph(first_gm, first_inputs)

        def uncached(lookup: Lookup, gm: Any, example_inputs: list) -> Callable[[], Any]:
            def run() -> Any:
                lookup.clear(keep_store=True)      # decisions forgotten, the open store kept
                return lookup.decide_graph(gm, example_inputs)
            return run

        rows = []
        for name, model, inputs, graphs in work:
            compile_s = compile_seconds(model, inputs)
            for i, (gm, example_inputs) in enumerate(graphs):
                hit = median_ms(uncached(hit_lookup, gm, example_inputs), args.repeat)
                miss = median_ms(uncached(miss_lookup, gm, example_inputs), args.repeat)
                cached = median_ms(lambda g=gm, x=example_inputs: hit_lookup.decide_graph(g, x), args.repeat)
                fp = median_ms(lambda g=gm, x=example_inputs: fingerprint_graph(g, x), args.repeat)
                tier = hit_lookup.decide_graph(gm, example_inputs).decision.tier.value
                rows.append((f"{name}[{i}]", len(gm.graph.nodes), compile_s / len(graphs), hit, miss, cached, fp,
                             tier))
        hit_lookup.clear()
        miss_lookup.clear()

    print(f"lookup overhead per graph (median of {args.repeat}; torch {torch.__version__}, "
          f"{platform.describe()}, {torch.get_num_threads()} threads)")
    print(f"{'graph':<22}{'nodes':>6}{'compile s':>11}{'hit ms':>9}{'miss ms':>9}{'cached ms':>11}"
          f"{'(fingerprint ms)':>18}{'hit/compile':>13}")
    for label, nodes, compile_s, hit, miss, cached, fp, tier in rows:
        assert tier == "exact", f"{label}: expected an exact hit, got {tier}"
        print(f"{label:<22}{nodes:>6}{compile_s:>11.2f}{hit:>9.2f}{miss:>9.2f}{cached:>11.2f}{fp:>18.2f}"
              f"{hit / (compile_s * 1000):>12.3%}")
    print("once per process, on top of the first graph's lookup:")
    print(f"  import tuner lookup modules  {tuner_import_ms:8.1f} ms   (torch itself: {torch_s:.1f} s)")
    print(f"  import the storage layer     {storage_import_ms:8.1f} ms   (SQLAlchemy; never alembic)")
    print(f"  open the database            {open_ms:8.1f} ms   (read-only, schema check)")
    print(f"  first lookup (warms caches)  {first_query_ms:8.1f} ms   (includes loading the knob tables)")
    print(f"  platform probe               {platform_ms:8.1f} ms   (Inductor's vec-ISA probe, which the "
          f"compile runs anyway, then cached)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
