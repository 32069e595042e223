"""Key values and key formulas: the one definition of every key tuner stores and compares.

A leaf module: it imports the standard library only, so `tuner.storage`, the exchange
checker and the capture code can all share these formulas without importing torch or
each other. `tuner.workload` (the Dynamo capture) and `tuner.platform` (probing this
machine) build their values here and re-export the names below.

Changing any formula here changes stored keys: old rows stop matching. Never do it
without bumping `tuner.workload.FINGERPRINT_VERSION` (graph keys) or a migration.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

GRAPH_KEY_LEN = 32
WORKLOAD_KEY_LEN = 32
PLATFORM_KEY_LEN = 24


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces. Used for keys and hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def graph_key(code: str) -> str:
    """The key of one graph: the hash of its canonical text (`GraphFingerprint.code`)."""
    return hashlib.sha256(code.encode()).hexdigest()[:GRAPH_KEY_LEN]


def workload_key(graph_keys: Iterable[str]) -> str:
    """The key of a workload: the hash of its graph keys, in Dynamo's order."""
    return hashlib.sha256("\n".join(graph_keys).encode()).hexdigest()[:WORKLOAD_KEY_LEN]


@dataclass(frozen=True)
class GraphFingerprint:
    """One Dynamo graph. `key` is the workload key (docs/design.md: structural, value-free)."""

    key: str            # hex sha256, 32 chars: graph_key(code)
    index: int          # order in which Dynamo produced it
    num_nodes: int
    input_meta: str     # canonical JSON of the inputs' shape/stride/dtype/device/requires_grad
    code: str           # readable canonical text of the graph (what was hashed)


@dataclass(frozen=True)
class Workload:
    """A model file's graphs under its inputs. `key` hashes the graph keys in order."""

    key: str
    name: str           # the model file's stem, for display only (never part of the key)
    graphs: tuple[GraphFingerprint, ...]


@dataclass(frozen=True)
class Platform:
    key: str               # hash of hardware_key + software_key
    hardware_key: str      # hash of `hardware`
    software_key: str      # hash of `software`
    device: str            # "cpu" or "cuda"
    hardware: tuple[tuple[str, str], ...]   # e.g. (("cpu_model", "AMD EPYC ..."), ("vec_isa", "avx2"), ...)
    software: tuple[tuple[str, str], ...]   # (("python", "3.11.7"), ("torch", "2.13.0+cpu"), ("triton", ...), ...)

    def describe(self) -> str:
        hw = dict(self.hardware)
        name = hw.get("gpu_name") or hw.get("cpu_model", "?")
        sw = dict(self.software)
        return f"{name} ({self.device}), torch {sw.get('torch', '?')}"


def platform_from_parts(device: str, hardware: Mapping[str, Any], software: Mapping[str, Any]) -> Platform:
    """Build a Platform (and its keys) from its parts; values are stored as strings.

    Used by `tuner.platform.current_platform`, to rebuild stored or imported platforms, and
    for other Ray nodes. The hardware key covers the device type and `hardware`; the
    software key covers `software`; the platform key covers both keys.
    """
    hw = tuple(sorted((str(k), str(v)) for k, v in hardware.items()))
    sw = tuple(sorted((str(k), str(v)) for k, v in software.items()))
    hardware_key = _platform_hash({"device": device, "hardware": dict(hw)})
    software_key = _platform_hash(dict(sw))
    return Platform(
        key=_platform_hash([hardware_key, software_key]),
        hardware_key=hardware_key,
        software_key=software_key,
        device=device,
        hardware=hw,
        software=sw,
    )


def _platform_hash(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:PLATFORM_KEY_LEN]
