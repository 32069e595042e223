"""The report page: `DIR/index.html` (self-contained) and the same figures as PNG files in DIR.

The page needs nothing beside itself: CSS inline, images as base64 data URIs, no script and
no external URL, so it can be mailed or attached to an issue. A section whose figure the data
cannot make shows one line saying why instead. Nothing dresses noise as signal (`noise`): the
history shades the noise floor and bars each trial's interval, the importances are not ranked
when every trial lies within the noise, and a kept "defaults" verdict is explained.

Sections, in order: the kept config, the optimization history, parameter importances, the
distribution of latencies, the Pareto front (only for a study of several objectives,
`tuner search --objective`: its first two, the front on all of them highlighted), the
failures and the operator profile.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.report import figures
from tuner.report.data import (ReportData, failure_rows, history_points, ok_latencies, pareto_points,
                               seed_label, status_counts)
from tuner.report.importance import parameter_importances
from tuner.report.noise import noise_floor, within_noise, within_noise_note
from tuner.report.tables import (best_html, defaults_kept_html, esc, failures_html, note, profile_html,
                                 summary_html)

if TYPE_CHECKING:
    from tuner.report.profile import ProfileResult

HISTORY, IMPORTANCES, LATENCIES, PARETO = FIGURE_FILES = ("history.png", "importances.png", "latencies.png",
                                                          "pareto.png")
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:60rem;margin:2rem auto;
padding:0 1rem;color:#1d2330;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #dde}
h3{font-size:1rem;margin-bottom:.3rem}img{max-width:100%;height:auto;border:1px solid #eef}
table{border-collapse:collapse;margin:.5rem 0;font-size:.88rem}
th,td{border:1px solid #ccd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f2f4f8}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.85em}.note{color:#5a6272;font-size:.9rem}
"""


@dataclass(frozen=True)
class Written:
    """What `write_report` wrote: the page and the figure files (names in DIR), in page order."""

    index: Path
    figures: tuple[str, ...]


@dataclass(frozen=True)
class _Section:
    title: str
    body: str
    png: tuple[str, bytes] | None = None     # (file name, PNG) when the section has a figure


def write_report(data: ReportData, out: Path, *, profile: ProfileResult | str) -> Written:
    """Write `out/index.html` and one PNG per figure into `out` (created if missing), replacing
    an earlier report there (its figures that this data cannot make are removed).

    `profile` is the operator profile, or the one line saying why there is none.
    """
    sections = [_Section("Kept config", best_html(data.bests, data.graphs) + defaults_kept_html(data)),
                _history(data), _importances(data), _latencies(data), *_pareto(data),
                _Section("Failures by status", failures_html(failure_rows(data.trials), status_counts(data.trials))),
                _Section("Operator profile: default compile against the kept config",
                         note(profile) if isinstance(profile, str) else profile_html(profile))]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for section in sections:
        if section.png is not None:
            name, png = section.png
            (out / name).write_bytes(png)
            written.append(name)
    for stale in sorted(set(FIGURE_FILES) - set(written)):
        # an earlier report's figure that this data cannot make would sit beside the page and mislead
        (out / stale).unlink(missing_ok=True)
    index = out / "index.html"
    index.write_text(_page(data, sections), encoding="utf-8")
    return Written(index=index, figures=tuple(written))


def _figure_section(title: str, name: str, png: bytes | None, *, why_not: str, caption: str = "") -> _Section:
    if png is None:
        return _Section(title, note(why_not))
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    body = f'<img src="{uri}" alt="{esc(title)}">' + (note(caption) if caption else "")
    return _Section(title, body, (name, png))


def _history(data: ReportData) -> _Section:
    points = history_points(data.trials)
    floor = noise_floor(data.trials)
    seeds = sorted({p.seed for p in points if p.seed})
    noise = (f"grey band: the noise floor, the default compile against itself ({floor.describe()})"
             if floor is not None else "no noise band: the defaults' trial stored no paired interval")
    caption = ("Speedup = the default compile's latency over the trial's, timed in pairs in one process; "
               f"bars: each trial's interval (about 95%); {noise}; the best so far is the search's own "
               "figure, unconfirmed; built-in seeds circled in red: " + (", ".join(seeds) or "none measured") + ".")
    png = figures.history_figure(points, floor.band if floor is not None else None)
    return _figure_section("Optimization history", HISTORY, png,
                           why_not="no trial was paired with the default compile, so there is no speedup to plot",
                           caption=caption)


def _importances(data: ReportData) -> _Section:
    title = "Parameter importances"
    floor = noise_floor(data.trials)
    if within_noise(data.trials, floor):    # ranking knobs by noise would read as a finding
        return _Section(title, note(within_noise_note(floor)))
    found = parameter_importances(data.trials, name=f"{Path(data.model).stem}-{data.study.id if data.study else 0}")
    png = figures.importance_figure(dict(found.values)) if found.values else None
    left_out = f" {found.note}." if found.values and found.note else ""
    return _figure_section(title, IMPORTANCES, png, why_not=found.note,
                           caption="Optuna's PED-ANOVA importance evaluator over the study's ok trials: how much "
                                   "each knob matters for reaching the best of them (objective: latency "
                                   f"ratio to the default compile).{left_out}")


def _latencies(data: ReportData) -> _Section:
    default_ms = next((r.measurement.latency_ms for r in data.trials
                       if r.measurement.ok and seed_label(r.params) == "defaults"), None)
    best_ms = data.bests[0].latency_ms if len(data.bests) == 1 else None
    png = figures.latency_figure(ok_latencies(data.trials), default_ms=default_ms, best_ms=best_ms)
    return _figure_section("Distribution of latencies", LATENCIES, png,
                           why_not="no ok trial has a latency")


def _pareto(data: ReportData) -> list[_Section]:
    """The Pareto section, for a study of several objectives only; none otherwise."""
    from tuner.search import OBJECTIVES

    objectives = data.study.objectives if data.study is not None else ()
    if len(objectives) < 2:
        return []
    points, front = pareto_points(data.trials, objectives)
    x, y = (OBJECTIVES[name].label for name in objectives[:2])
    png = figures.pareto_figure(points, front, xlabel=x, ylabel=y, joined=len(objectives) == 2)
    caption = (f"The study minimised {', '.join(objectives)} and prefers {data.study.prefer}; "
               f"{len(front)} of {len(points)} ok trials are on the front (on all its objectives).")
    return [_figure_section("Pareto front", PARETO, png, why_not="no ok trial has every objective's value",
                            caption=caption)]


def _page(data: ReportData, sections: list[_Section]) -> str:
    body = "".join(f"<section><h2>{esc(s.title)}</h2>{s.body}</section>" for s in sections)
    title = f"tuner report: {Path(data.model).name}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,">'   # no favicon request, so a browser logs no missing file
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{esc(title)}</h1>{summary_html(data)}{body}</body></html>\n")
