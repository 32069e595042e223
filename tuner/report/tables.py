"""The report's HTML tables and text blocks: kept config, failures, operator profile, summary.

Each function returns an HTML fragment; every value from the store or the model is escaped, numbers
included (`num`): a shared SQLite file's integer column may hold any text, and reaches here as it is.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tuner.report.data import FailureRow, ReportData, knob_changes, status_counts, verdict_text
from tuner.report.noise import advice, closest, noise_floor

if TYPE_CHECKING:
    from tuner.report.profile import ProfileResult
    from tuner.storage import BestConfig


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def num(value: object, spec: str = "") -> str:
    """A number as `format(value, spec)`, escaped; anything else (a stored "number" that is text, a
    bool) escaped as text, never formatted or placed raw."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return esc(format(value, spec))
    return esc(value)


def when(value: object) -> str:
    """A stored time as "YYYY-MM-DD HH:MM UTC", escaped; "?" for anything that is not a datetime."""
    import datetime as dt

    return esc(f"{value:%Y-%m-%d %H:%M} UTC") if isinstance(value, dt.datetime) else "?"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Sequence[int] = ()) -> str:
    """An HTML table of already-escaped cells; columns in `numeric` align right."""
    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(f'<{tag}{" class=num" if i in numeric else ""}>{c}</{tag}>' for i, c in enumerate(row))

    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table><thead><tr>{cells('th', header)}</tr></thead><tbody>{body}</tbody></table>"


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def summary_html(data: ReportData) -> str:
    """Model, platform, study and trial counts: the lines under the page title."""
    lines = [f"<b>platform</b> {esc(data.platform)}", f"<b>graphs</b> {num(data.graphs)}"]
    if data.study is not None:
        s = data.study
        lines.append(f"<b>study</b> {num(s.id)} (newest of {num(data.studies)}), {when(s.created_at)}, "
                     f"sampler {esc(s.sampler)}, seed {esc(s.seed)}, by {esc(s.user)}@{esc(s.host)}")
        counts = ", ".join(f"{num(n)} {esc(status)}" for status, n in status_counts(data.trials).items())
        lines.append(f"<b>trials</b> {num(len(data.trials))}: {counts}")
    else:
        lines.append("<b>study</b> none stored here (the kept configs were imported or merged)")
    return "<p>" + "<br>".join(lines) + "</p>"


def best_html(bests: Sequence[BestConfig], graphs: int) -> str:
    """Per tuned graph: the verdict, the confirmed speedup with its interval, and the knobs that
    differ from Inductor's defaults (a table), or a note when nothing is kept yet."""
    if not bests:
        return note("no confirmed config is stored yet (the search stopped before confirming); "
                    "finish it with: tuner search MODEL --resume")
    parts = []
    for index, best in enumerate(bests):
        title = f"graph {index} of {graphs}" if graphs > 1 else "the model's graph"
        parts.append(f"<h3>{esc(title)}: {esc(verdict_text(best))}</h3>")
        parts.append(f"<p><b>confirmed speedup over the default compile: {num(best.speedup, '.2f')}x</b> "
                     f"[{num(best.ci_low, '.2f')}, {num(best.ci_high, '.2f')}] over {num(best.rounds)} paired rounds"
                     f"{_latencies(best)}{_search_figure(best)}</p>")
        if best.stability is not None:
            parts.append(f"<p>stability: fastest or within 1% of the fastest in {num(best.stability, '.0%')} "
                         f"of bootstrap resamples of the held-out rounds</p>")
        changes = knob_changes(best)
        if changes:
            parts.append(table(("knob", "Inductor default", "kept value"),
                               [(f"<code>{esc(c.knob)}</code>", esc(c.default), f"<b>{esc(c.best)}</b>")
                                for c in changes]))
        if best.runtime:
            parts.append(table(("runtime knob", "kept value"),
                               [(f"<code>{esc(k)}</code>", f"<b>{esc(v)}</b>") for k, v in sorted(best.runtime.items())]))
        parts.append(f'<p class="note">kept by {esc(best.user)}@{esc(best.host)}, {when(best.created_at)}, '
                     f"tuner {esc(best.tuner_version)}, torch {esc(best.torch_version)}, from {esc(best.source)}</p>")
    return "".join(parts)


def defaults_kept_html(data: ReportData) -> str:
    """Why a kept "defaults" verdict came out: the noise floor of this model on this machine, how
    close the best candidates came, and what to try next; "" when no graph kept the defaults."""
    kept = [b for b in data.bests if b.is_default and not b.eager]
    if not kept:
        return ""
    floor = noise_floor(data.trials)
    if floor is None:
        noise = ("The noise floor is unknown: the defaults' own trial stored no paired interval, so "
                 "nothing says how far this model's measurements move here with nothing changed.")
    else:
        per_call = f", at {floor.baseline_ms:.3f} ms per call" if floor.baseline_ms is not None else ""
        noise = (f"Noise floor: the default compile timed against itself read {esc(floor.describe())}{per_call}: "
                 f"with nothing changed, this model's measurements on this machine move that much, so a "
                 f"gain must clear it to count.")
    near = closest(data.trials)
    if near:
        band = floor.band if floor is not None else None
        items = "".join(f"<li>trial {c.number}: <b>{c.speedup:.2f}x</b>{_interval(c.low, c.high)} "
                        f"<code>{esc(c.config)}</code>{_against(c.speedup, c.low, band)}</li>" for c in near)
        close = f"<p>How close the best candidates came in the search (paired with the defaults):</p><ul>{items}</ul>"
    else:
        close = note("no candidate besides the defaults finished ok, so none came close")
    rounds = max(b.rounds for b in kept)
    tips = advice(study=data.study, trials=len(data.trials), rounds=rounds, platform=data.platform,
                  baseline_ms=floor.baseline_ms if floor is not None else None)
    graphs = "this graph" if len(data.bests) == 1 else f"{len(kept)} of {len(data.bests)} graphs"
    return (f"<h3>Why Inductor's defaults were kept</h3><p>No candidate beat the default compile beyond "
            f"the noise in the confirmation run, so <code>backend=\"tuner\"</code> applies Inductor's "
            f"defaults to {graphs}. {noise}</p>{close}<p>What to try next:</p><ul>"
            + "".join(f"<li>{esc(tip)}</li>" for tip in tips) + "</ul>")


def _interval(low: float | None, high: float | None) -> str:
    return f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""


def _against(speedup: float, low: float | None, band: tuple[float, float] | None) -> str:
    """Where a candidate stands against the noise: inside it, or beyond it in its trial only."""
    if band is not None:
        inside = band[0] <= speedup <= band[1]
    elif low is not None:
        inside = low <= 1.0
    else:
        return ""
    return ", within the noise" if inside else ", beyond the noise in its trial, not confirmed"


def _latencies(best: BestConfig) -> str:
    if best.latency_ms is None or best.baseline_ms is None:
        return ""
    return f"; {num(best.latency_ms, '.3f')} ms against {num(best.baseline_ms, '.3f')} ms for the default compile"


def _search_figure(best: BestConfig) -> str:
    if best.search_speedup is None:
        return ""
    return f" (its search trial saw {num(best.search_speedup, '.2f')}x, unconfirmed)"


def failures_html(rows: Sequence[FailureRow], counts: dict[str, int]) -> str:
    """The failures by status with their most common error lines; a note when none failed.
    Pruned and cancelled trials are named apart: they are not failures."""
    apart = ", ".join(f"{counts[s]} {s}" for s in ("pruned", "cancelled") if counts.get(s))
    tail = note(f"not counted as failures: {apart}") if apart else ""
    if not rows:
        return note("no trial failed") + tail
    body = []
    for row in rows:
        errors = "<br>".join(f"<code>{esc(str(line)[:200])}</code> &times;{num(n)}" for line, n in row.errors)
        body.append((esc(row.status), num(row.count), errors))
    return table(("status", "trials", "most common error lines"), body, numeric=(1,)) + tail


def profile_html(result: ProfileResult) -> str:
    """The operator table (self time per call, default compile against the kept config) and the
    lookup lines saying what the tuned side applied."""
    rows = [(f"<code>{esc(op.name)}</code>", num(op.default_ms, ".4f"), num(op.tuned_ms, ".4f"),
             _change(op.default_ms, op.tuned_ms)) for op in result.ops]
    where = "CPU" if result.device == "cpu" else "device"
    parts = [(f"<p>Self {where} time per call over {num(result.calls)} profiled calls (after warm-up): "
              f"<b>{num(result.default_ms, '.3f')} ms</b> default compile, <b>{num(result.tuned_ms, '.3f')} ms</b> kept config "
              f"({_change(result.default_ms, result.tuned_ms)}).</p>"),
             table(("operator", "default ms", "kept config ms", "change"), rows, numeric=(1, 2, 3))]
    if result.lookup:
        parts.append("<p class=\"note\">what the kept side applied:<br>"
                     + "<br>".join(f"<code>{esc(line)}</code>" for line in result.lookup) + "</p>")
    return "".join(parts)


def _change(before: float, after: float) -> str:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (before, after)):
        return "?"
    if before <= 0:
        return "new" if after > 0 else "-"
    return esc(f"{(after - before) / before:+.0%}")
