"""The report's figures, drawn with matplotlib's Agg backend (no display) as PNG bytes.

Each function takes plain values (`tuner.report.data`) and returns the PNG, or None when the
data cannot make the figure (the page then says why in one line). Figures are made on their
own Agg canvas, never through pyplot, so none stays registered (nothing to close), and each
is cleared once saved.
"""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tuner.report.data import HistoryPoint, running_best

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH, HEIGHT, DPI = 7.5, 3.6, 110
SEED_MARKERS = ("s", "D", "^", "v", "P", "X")      # one per built-in seed, in order of appearance


def _figure() -> Figure:
    # matplotlib.figure.Figure with its own Agg canvas: never touches pyplot's global state or a display
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png")
    fig.clear()
    return out.getvalue()


def history_figure(points: Sequence[HistoryPoint], band: tuple[float, float] | None = None) -> bytes | None:
    """`history_plot` as PNG; None when no trial was paired."""
    fig = history_plot(points, band)
    return None if fig is None else _png(fig)


def history_plot(points: Sequence[HistoryPoint], band: tuple[float, float] | None = None) -> Figure | None:
    """Each paired trial's speedup over the default compile by trial number with its interval as
    a bar, the noise floor `band` (the default against itself, around 1.0) shaded when known, the
    running best, a line at 1.0 and a marker per built-in seed. None when no trial was paired."""
    if not points:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    ok = [p for p in points if p.ok]
    pruned = [p for p in points if not p.ok]
    if band is not None:
        ax.axhspan(*band, color="0.85", alpha=0.7, linewidth=0,
                   label=f"noise: default vs itself ({band[0]:.2f}x to {band[1]:.2f}x)")
    ax.axhline(1.0, color="0.45", linestyle="--", linewidth=1, label="default compile (1.0)")
    barred = [p for p in ok if p.low is not None and p.high is not None]
    if barred:
        ax.errorbar([p.number for p in barred], [p.speedup for p in barred],
                    yerr=[[p.speedup - p.low for p in barred], [p.high - p.speedup for p in barred]],
                    fmt="none", ecolor="tab:blue", alpha=0.5, elinewidth=1, capsize=2, label="trial's interval")
    ax.scatter([p.number for p in ok], [p.speedup for p in ok], s=18, color="tab:blue", label="ok trial")
    if pruned:
        ax.scatter([p.number for p in pruned], [p.speedup for p in pruned], s=18, marker="x",
                   color="0.6", label="pruned (partial pairing)")
    best = running_best(list(points))
    if best:
        ax.step([n for n, _ in best], [s for _, s in best], where="post", color="tab:green",
                label="best so far (unconfirmed)")
    seeds = sorted({p.seed for p in ok if p.seed}, key=lambda s: (s != "defaults", s))
    for marker, seed in zip(SEED_MARKERS, seeds):
        mine = [p for p in ok if p.seed == seed]
        ax.scatter([p.number for p in mine], [p.speedup for p in mine], s=70, marker=marker,
                   facecolors="none", edgecolors="tab:red", linewidths=1.4, label=seed)
    ax.set_xlabel("trial number")
    ax.set_ylabel("speedup over default compile (x)")
    ax.set_title("Optimization history (higher is better)")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return fig


def pareto_figure(points: Sequence[tuple[float, float]], front: Sequence[tuple[float, float]], *,
                  xlabel: str, ylabel: str, joined: bool = True) -> bytes | None:
    """Every ok trial on the first two objectives, the Pareto front highlighted (and, with `joined`,
    joined in order of the first: a front of more objectives seen in two is no staircase); None
    without points."""
    if not points:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    ax.scatter([x for x, _ in points], [y for _, y in points], s=16, color="0.6", label="ok trial")
    line = sorted(front)
    ax.plot([x for x, _ in line], [y for _, y in line], "o-" if joined else "o", color="tab:red", markersize=6,
            label="Pareto front")
    ax.set_xlabel(f"{xlabel} (lower is better)")
    ax.set_ylabel(f"{ylabel} (lower is better)")
    ax.set_title("Pareto front")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def importance_figure(importances: Mapping[str, float]) -> bytes | None:
    """A horizontal bar per knob, most important on top; None when there are none."""
    if not importances:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names], color="tab:purple")
    ax.set_xlabel("importance (share of the objective's variance)")
    ax.set_title("Parameter importances")
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def latency_figure(latencies: Sequence[float], *, default_ms: float | None,
                   best_ms: float | None) -> bytes | None:
    """A histogram of the ok trials' median latencies, with the defaults' trial's and the kept
    config's (from its confirmation run) as lines when known; None without latencies."""
    if not latencies:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    ax.hist(latencies, bins=min(30, max(5, len(latencies) // 2)), color="tab:blue", alpha=0.8)
    if default_ms is not None:
        ax.axvline(default_ms, color="0.3", linestyle="--", label=f"defaults' trial ({default_ms:.3f} ms)")
    if best_ms is not None:
        ax.axvline(best_ms, color="tab:green", label=f"kept config, confirmation run ({best_ms:.3f} ms)")
    ax.set_xlabel("median latency per call (ms)")
    ax.set_ylabel("trials")
    ax.set_title("Distribution of latencies (ok trials)")
    if default_ms is not None or best_ms is not None:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)
