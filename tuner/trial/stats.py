"""The statistics behind every claim: medians, their intervals, and paired speedups.

Leaf module (stdlib only). A speedup is always the median of per-round ratios
baseline/variant, measured in the same process with the two interleaved, so a slow drift
of a noisy machine cancels; its interval is the distribution-free order-statistic interval
of that median (about 95%).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Speedup:
    """Median of per-round baseline/variant ratios and its interval (about 95%)."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def clears_noise(self) -> bool:
        """Faster beyond the noise: the whole interval lies above 1."""
        return self.low > 1.0

    @property
    def slower_beyond_noise(self) -> bool:
        return self.high < 1.0

    @property
    def width(self) -> float:
        """The interval's width relative to the median (0.05: about ±2.5%)."""
        return (self.high - self.low) / self.median if self.median > 0 else math.inf

    def text(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}, {self.high:.2f}]"


# The fewest values whose full range covers the median with 95%: 1 - 2 * 0.5**6 = 0.969 (5 give 0.9375).
MIN_INTERVAL_VALUES = 6


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic interval for the median (binomial, no distribution assumed).

    Below MIN_INTERVAL_VALUES values not even the full range reaches 95% (2 values: 50%, 4:
    87.5%), so the interval is unbounded, (-inf, inf): it never clears the noise, and a claim
    from so few rounds keeps the defaults. The same where the full range falls short of a higher
    `confidence` (6 values reach 96.9%, 7 reach 98.4%).
    """
    xs, n = sorted(values), len(values)
    if n < MIN_INTERVAL_VALUES or 1 - 2 * 0.5 ** n < confidence:     # not even the full range covers it
        return -math.inf, math.inf
    cdf, k = 0.0, 0
    for k in range(n + 1):
        cdf += math.comb(n, k) / 2**n
        if cdf > (1 - confidence) / 2:
            break
    lo = max(0, k - 1)
    return xs[lo], xs[n - 1 - lo]


def paired_speedup(baseline_ms: Sequence[float], variant_ms: Sequence[float], *,
                   confidence: float = 0.95) -> Speedup | None:
    """Speedup of the variant over the baseline from paired rounds (round i of each was timed
    in the same round), its interval at `confidence`; None when no round has a positive variant time."""
    ratios = [b / v for b, v in zip(baseline_ms, variant_ms) if v > 0]
    if not ratios:
        return None
    low, high = median_interval(ratios, confidence)
    return Speedup(median=statistics.median(ratios), low=low, high=high, rounds=len(ratios))


def median_and_iqr(samples: Sequence[float]) -> tuple[float, float]:
    """The median and the interquartile range (the full range below 4 samples)."""
    if len(samples) < 4:
        return statistics.median(samples), (max(samples) - min(samples))
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return statistics.median(samples), q3 - q1
