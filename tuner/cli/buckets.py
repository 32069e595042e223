"""`tuner search MODEL --shapes ...`: run the bucket searches and print the weighted latency."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.cli.common import format_table

if TYPE_CHECKING:
    from tuner.search import BucketSearch, Execution, SearchEvents, SearchOptions, SearchResult
    from tuner.settings import Settings


def search_buckets(options: SearchOptions, shapes: str, *, execution: Execution, settings: Settings,
                   events: SearchEvents) -> list[SearchResult]:
    """Parse `shapes` (UsageError), search each bucket (`tuner.search.run_bucket_search`; each
    bucket's summary comes through `events`), print the weighted table, return every result."""
    from tuner.search import run_bucket_search
    from tuner.workload import parse_shapes

    search = run_bucket_search(options, parse_shapes(shapes), execution=execution, settings=settings, events=events)
    print(f"\n{weighted_table(search)}")
    return [r for b in search.buckets for r in b.results]


def weighted_table(search: BucketSearch) -> str:
    """Per platform: each bucket's weight and confirmed latency (default compile, tuned), then the
    weighted latency, the sum of weight x latency (the expected time of one call)."""
    blocks = []
    for platform in search.platforms():
        rows = [("shape bucket", "weight", "default ms", "tuned ms", "speedup")]
        for bucket, figures in search.latencies(platform):
            cells = ("-", "-", "no correct trial") if figures is None else (
                f"{figures[0]:.3f}", f"{figures[1]:.3f}", f"{figures[0] / figures[1]:.2f}x")
            rows.append((bucket.label(), f"{bucket.weight:.2f}", *cells))
        total = search.weighted(platform)
        if total is not None:
            rows.append(("weighted", "1.00", f"{total[0]:.3f}", f"{total[1]:.3f}", f"{total[0] / total[1]:.2f}x"))
        heading = f"shape buckets on platform {platform[:12]} (weighted latency = sum of weight x latency):"
        blocks.append(heading + "\n" + format_table(rows, rule=True))
    return "\n\n".join(blocks)
