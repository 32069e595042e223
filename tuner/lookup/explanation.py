"""Explanations: for one graph, the lookup decision plus the nearest stored keys.

Used by `tuner explain` and by `TUNER_EXPLAIN=1` inside the backend (which calls
`explain_graph` after the lookup decided). Reads only. The decisions come from a
`DecisionSource`: `tuner.lookup.Lookup`, which this module does not import.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tuner.errors import StorageError
from tuner.lookup.decision import Decision, Tier, short
from tuner.lookup.opt_in import opt_in_hint
from tuner.precision import FP32

if TYPE_CHECKING:
    from tuner.inductor import CompileConfig
    from tuner.keys import GraphFingerprint, Platform
    from tuner.storage import Store


class DecisionSource(Protocol):
    """What an explanation reads: decisions, and the store behind them (`tuner.lookup.Lookup`)."""

    @property
    def unusable(self) -> str | None:
        """Why the database cannot be used in this process, or None."""

    def decide(self, graph_key: str, platform: "Platform", *, code: str | None = None) -> Decision:
        """The decision for one graph key (canonical text `code`, when known) on one platform; never raises."""

    def store(self) -> "Store":
        """The read-only store; raises StorageError when it cannot be used."""


@dataclass(frozen=True)
class Explanation:
    """`tuner explain`'s answer for one graph."""

    fingerprint: "GraphFingerprint"
    decision: Decision
    nearest: tuple[str, ...] = field(default=())    # lines naming the nearest stored keys


def explain_graph(lookup: DecisionSource, fingerprint: "GraphFingerprint", platform: "Platform", *,
                  workload_name: str | None = None) -> Explanation:
    """The decision for one graph plus, on anything but an exact hit, the nearest stored keys.

    Never raises for database problems: they become the decision's reason.
    """
    decision = lookup.decide(fingerprint.key, platform, code=fingerprint.code)
    nearest: list[str] = [f"same graph on {e.platform.describe()} [platform {short(e.platform.key)}]: "
                          f"{e.why_not}" for e in decision.elsewhere]
    if decision.tier is not Tier.EXACT and lookup.unusable is None:
        try:
            nearest += _nearest_graphs(lookup.store(), fingerprint, platform, workload_name)
        except StorageError as exc:
            nearest.append(f"could not search for similar graphs: {exc}")
    return Explanation(fingerprint=fingerprint, decision=decision, nearest=tuple(nearest))


def _nearest_graphs(store: "Store", fingerprint: "GraphFingerprint", platform: "Platform",
                    workload_name: str | None, *, limit: int = 3) -> list[str]:
    """Tuned graphs closest to `fingerprint`, one line each, naming what differs.

    Candidates are the graphs of stored workloads that have a best config somewhere
    (`Store.snapshot`): those of workloads with the same name when there are any (another
    batch size of the same model file, say), else all of them. They rank by the
    differences in input metadata, then in node count.
    """
    names = store.workload_names()
    same_name = [key for key, name in names.items() if workload_name is not None and name == workload_name]
    snapshot = store.snapshot(workload_keys=same_name or None)
    tuned_on: dict[str, set[str]] = {}
    for best in snapshot.bests:
        tuned_on.setdefault(best.graph_key, set()).add(best.platform_key)
    mine = _metas(fingerprint.input_meta)
    ranked, seen = [], {fingerprint.key}
    for workload in snapshot.workloads:
        for graph in workload.graphs:
            if graph.key in seen or graph.key not in tuned_on:
                continue
            seen.add(graph.key)
            theirs = _metas(graph.input_meta)
            score = (_meta_distance(mine, theirs), abs(graph.num_nodes - fingerprint.num_nodes))
            ranked.append((score, workload, graph, theirs))
    ranked.sort(key=lambda item: item[0])
    lines = []
    for _, workload, graph, theirs in ranked[:limit]:
        platforms = tuned_on[graph.key]
        tuned = ("tuned on this platform" if platform.key in platforms
                 else f"tuned on {len(platforms)} other platform(s)")
        diff = _meta_diff(mine, theirs, fingerprint.num_nodes, graph.num_nodes)
        lines.append(f"graph {graph.key} (graph {graph.index} of workload {workload.name!r} "
                     f"{short(workload.key)}; {tuned}): {diff}")
    return lines


def _metas(input_meta: str) -> list[dict[str, Any]]:
    import json

    try:
        metas = json.loads(input_meta)
    except ValueError:
        return []
    return [m for m in metas if isinstance(m, dict)] if isinstance(metas, list) else []


def _meta_distance(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    """A rough count of differences: dtype or rank 10 each, each differing size 1."""
    if len(a) != len(b):
        return 1000 + abs(len(a) - len(b))
    distance = 0
    for x, y in zip(a, b):
        if x.get("dtype") != y.get("dtype") or x.get("param") != y.get("param"):
            distance += 10
        xs, ys = x.get("shape", []), y.get("shape", [])
        distance += 10 if len(xs) != len(ys) else sum(p != q for p, q in zip(xs, ys))
    return distance


def _meta_diff(a: list[dict[str, Any]], b: list[dict[str, Any]], nodes_a: int, nodes_b: int) -> str:
    """What differs, e.g. "input 2: float32[16,32] here, float32[8,32] there"."""
    parts = []
    if nodes_a != nodes_b:
        parts.append(f"{nodes_a} nodes here, {nodes_b} there")
    if len(a) != len(b):
        parts.append(f"{len(a)} inputs here, {len(b)} there")
    else:
        for i, (x, y) in enumerate(zip(a, b)):
            tx, ty = _meta_text(x), _meta_text(y)
            if tx != ty:
                parts.append(f"input {i}: {tx} here, {ty} there")
    if not parts:
        parts.append("same inputs, another graph structure")
    return "; ".join(parts[:3]) + ("; ..." if len(parts) > 3 else "")


def format_explanation(exp: Explanation, *, note: str = "") -> str:
    """Multi-line text for one graph, as `tuner explain` and TUNER_EXPLAIN=1 print it."""
    fp, d = exp.fingerprint, exp.decision
    lines = [f"graph {fp.index}: {TIER_TEXT[d.tier]}",
             f"  key: {fp.key} ({fp.num_nodes} nodes; inputs {inputs_text(fp.input_meta)})"]
    if d.platform is not None:
        lines.append(f"  platform: {d.platform.describe()} [{d.platform.key}]")
    lines.append(f"  why: {d.reason}")
    lines += applies_lines(d)
    if note:
        lines.append(f"  note: {note}")
    lines += [f"  nearest: {line}" for line in exp.nearest]
    return "\n".join(lines)


def applies_lines(d: Decision) -> list[str]:
    """What backend="tuner" (and tuner.compile, the same backend) applies to the graph, as one
    "applies:" line. A freezing config applies as stored, freezing included: its graph's key
    carries grad=0, so the graph is compiled with grad disabled (`tuner.inductor.freezing`)."""
    if d.eager:
        return ["  applies: nothing: eager won: runs uncompiled (no Inductor compile)"]
    if not d.hit:
        return ["  applies: Inductor's defaults"]
    if d.config.is_default:
        return ["  applies: Inductor's defaults (the search found nothing better)"]
    if d.config.precision != FP32:            # only where the compile call opts in (tuner.lookup.decision)
        return [f"  applies: {config_text(d.config)}, only where the compile call opts in; elsewhere "
                f"Inductor's defaults ({opt_in_hint(d.config.precision)})"]
    if not d.config.freezing:
        return [f"  applies: {config_text(d.config)}"]
    return [f"  applies: {config_text(d.config)} (inference only: frozen at the first call under "
            f"torch.no_grad(), re-frozen if the weights change)"]


TIER_TEXT = {
    Tier.EXACT: "exact hit (this graph, this platform)",
    Tier.SAME_HARDWARE: "same-hardware hit (this graph, this hardware, other software)",
    Tier.NEAREST_BUCKET: "nearest-bucket hit (this graph at another size, this platform)",
    Tier.MISS: "miss",
    Tier.UNAVAILABLE: "no lookup (database or stored config unusable)",
}


def inputs_text(input_meta: str) -> str:
    """`[{"dtype": "float32", "shape": [8, 32], ...}]` as `float32[8,32], ...` (params marked)."""
    metas = _metas(input_meta)
    return ", ".join(_meta_text(m) for m in metas) or "none"


def _meta_text(meta: dict[str, Any]) -> str:
    if "shape" not in meta:
        return str(meta.get("sym", meta.get("value", "?")))
    text = f"{meta.get('dtype', '?')}[{','.join(str(s) for s in meta['shape'])}]"
    if meta.get("param"):
        text += " param"
    elif meta.get("requires_grad"):
        text += " grad"
    return text


def config_text(config: "CompileConfig") -> str:
    parts = [f"{k}={v!r}" for k, v in config.inductor]
    parts += [f"functorch.{k}={v!r}" for k, v in config.functorch]
    if config.freezing:
        parts.append("freezing=True")
    if config.precision != FP32:
        parts.append(f"precision={config.precision!r}")
    if config.mode:
        parts.insert(0, f"mode={config.mode!r}")
    return ", ".join(parts) or "defaults"


def print_explanation(exp: Explanation, *, note: str = "") -> None:
    print("tuner: " + format_explanation(exp, note=note), file=sys.stderr, flush=True)
