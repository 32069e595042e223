"""Hand-made platforms, workloads, studies and trial records for the store's tests."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tuner.platform import Platform
from tuner.storage import Store, TrialRecord
from tuner.trial import Measurement, Status
from tuner.keys import GraphFingerprint, Workload


def make_platform(key: str = "plat-a", hardware_key: str = "hw-a") -> Platform:
    return Platform(key=key, hardware_key=hardware_key, software_key=f"sw-{key}", device="cpu",
                    hardware=(("cpu_model", "Test CPU"), ("vec_isa", "avx2")),
                    software=(("python", "3.11.7"), ("torch", "2.13.0+cpu")))


def make_workload(key: str = "wl-a", graph_keys: tuple[str, ...] = ("g1", "g2")) -> Workload:
    graphs = tuple(GraphFingerprint(key=g, index=i, num_nodes=3 + i, input_meta='{"x":1}',
                                    code=f"graph {g}") for i, g in enumerate(graph_keys))
    return Workload(key=key, name="tiny", graphs=graphs)


def make_study(store: Store, workload: Workload | None = None, platform: Platform | None = None):
    workload, platform = workload or make_workload(), platform or make_platform()
    store.ensure_platform(platform)
    store.ensure_workload(workload)
    return store.create_study(workload_key=workload.key, platform_key=platform.key,
                              space_hash="space-1", sampler="tpe", seed=7, trials_requested=10,
                              user="alice", host="box", tuner_version="0.1.0")


def trial(number: int, candidate_key: str, **params) -> TrialRecord:
    now = datetime.now(timezone.utc)
    measurement = Measurement(status=Status.OK, latency_ms=1.5 + number, spread_ms=0.1,
                              compile_s=2.0, peak_mem_mb=100.0, reps=20, worker="box/1")
    return TrialRecord(number=number, candidate_key=candidate_key, params=params,
                       measurement=measurement, started_at=now - timedelta(seconds=3),
                       finished_at=now)

