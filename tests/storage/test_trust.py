"""Stored rows are untrusted input (issue 22 items 2-4): `tuner.storage.trust` checks each one against
what its own platform can apply, and lookup skips a row that fails with one warning.

The unit cases pin each rule of the check; the lookup cases store the same rows through the real
Store (which, like raw SQL, writes what it is given) and ask a real `Lookup` for them; the unsafe
opt-in compiles the tiny MLP for real. Import refusals of the same rows are in
`test_exchange_refusals.py` and `test_kernel_exchange.py`; fresh processes in `test_hostile_teammate.py`.
"""
from __future__ import annotations

import logging
import sqlite3
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fixtures.sharing_data import best, platform, workload
from helpers import run_main, tiny_model_and_input
from helpers.stored import store_configs, tiny_workload
from tuner.platform import platform_from_parts
from tuner.storage import KernelConfig, Store, upgrade
from tuner.storage.trust import (best_problem, control_problem, evidence_problem, kernel_problem, params_problem,
                                 triton_config_problem)

CPU = platform("AMD EPYC 9454")
CUDA = platform_from_parts("cuda", {"gpu": "NVIDIA H200", "capability": "9.0", "memory_gb": "141"},
                           {"python": "3.11.9", "torch": "2.13.0", "triton": "3.9.0", "cuda": "12.8", "tuner": "0.1.0"})
W = workload("mlp", "relu")

# Knobs a row may not set on a CPU platform, whatever it claims: CUDA-only knobs (the unsafe ones
# among them) and a CUDA-only value of a knob both tables have.
NOT_ON_CPU = {
    "assume_32bit_indexing": ({"assume_32bit_indexing": True}, "'assume_32bit_indexing' is not one tuner sets on cpu"),
    "use_fast_math": ({"use_fast_math": True}, "'use_fast_math' is not one tuner sets on cpu"),
    "codegen_upcast_to_fp32": ({"triton.codegen_upcast_to_fp32": False}, "is not one tuner sets on cpu"),
    "CUDA-only GEMM backend": ({"max_autotune": True, "max_autotune_gemm_backends": "TRITON"},
                               "max_autotune_gemm_backends: value 'TRITON' is not one of"),
    "CUDA-only mode": ({"mode": "reduce-overhead"}, "mode: value 'reduce-overhead' is not one of"),
    "wrong type": ({"max_autotune": "yes"}, "is not a bool"),
    "out of range": ({"cpp.min_chunk_size": 10**6}, "outside"),
    "nested value": ({"max_fusion_size": [8]}, "single JSON scalars"),
}


@pytest.mark.parametrize("case", NOT_ON_CPU)
def test_knobs_are_checked_against_the_platforms_own_device_table(case: str) -> None:
    params, message = NOT_ON_CPU[case]
    problem = params_problem(params, CPU, unsafe=True)
    assert problem is not None and message in problem, problem


def test_a_cuda_knob_applies_on_cuda_and_an_unsafe_one_only_with_the_rows_flag() -> None:
    assert params_problem({"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}, CUDA, unsafe=False) is None
    assert params_problem({"use_fast_math": True}, CUDA, unsafe=True) is None
    assert "does not record a search run with --unsafe" in params_problem({"use_fast_math": True}, CUDA, unsafe=False)
    assert params_problem({"max_autotune": True, "cpp.min_chunk_size": 512}, CPU, unsafe=False) is None


EVIDENCE = {
    "ci_low 1e300": (dict(ci_low=1e300, speedup=1e300, ci_high=1e300), "ci_high <= 100"),
    "speedup below its interval": (dict(ci_low=1.1, speedup=1.05, ci_high=1.2), "ci_low <= speedup <= ci_high"),
    "speedup above its interval": (dict(ci_low=1.1, speedup=1.3, ci_high=1.2), "ci_low <= speedup <= ci_high"),
    "infinite interval": (dict(ci_high=float("inf")), "ci_high is inf, not a finite number"),
    "nan speedup": (dict(speedup=float("nan")), "speedup is nan"),
    "absurdly slow": (dict(ci_low=1e-9, speedup=0.5), "0.01 <= ci_low"),
    "rounds unbounded": (dict(rounds=10**9), "rounds 1000000000 is outside"),
    "no rounds": (dict(rounds=0), "rounds 0 is outside"),
    "rounds as text": (dict(rounds="15"), "rounds '15' is outside"),
    "zero latency": (dict(latency_ms=0.0), "latency_ms 0.0 is outside"),
}


@pytest.mark.parametrize("case", EVIDENCE)
def test_evidence_must_be_finite_ordered_and_capped(case: str) -> None:
    changes, message = EVIDENCE[case]
    honest = best(W, CPU, ci_low=1.1, speedup=1.2)
    assert evidence_problem(honest) is None
    problem = evidence_problem(replace(honest, **changes))
    assert problem is not None and message in problem, problem


def _kernel(name: str, latency: float = 0.5, **config: object) -> KernelConfig:
    return KernelConfig(kernel_key="k" * 16, kernel_name=name, platform_key=CPU.key, key_args=(("M", 64),),
                        dtypes="float32", config=tuple(config.items()), latency_ms=latency, spread_ms=0.01,
                        configs_tried=4, space_size=4, user="alice", host="box", tuner_version="0.1.0",
                        torch_version="2.13.0", triton_version="3.9.0")


TRITON = "inductor-triton:" + "f" * 32
KERNELS = {
    "the issue's config": (dict(XBLOCK=3, num_warps=0, num_stages=-5), "XBLOCK 3 is not a power of two"),
    "block over Inductor's maximum": (dict(XBLOCK=16384, num_warps=4, num_stages=1), "up to 8192"),
    "block as a float": (dict(XBLOCK=128.0, num_warps=4, num_stages=1), "not a plain int"),
    "block as a bool": (dict(XBLOCK=True, num_warps=4, num_stages=1), "not a plain int"),
    "a key Inductor does not tune": (dict(XBLOCK=128, BLOCK_Q=64, num_warps=4, num_stages=1), "'BLOCK_Q' is not one"),
    "no warps": (dict(XBLOCK=128, num_warps=0, num_stages=1), "num_warps 0 is not a power of two up to 32"),
    "64 warps": (dict(XBLOCK=128, num_warps=64, num_stages=1), "num_warps 64"),
    "3 warps": (dict(XBLOCK=128, num_warps=3, num_stages=1), "num_warps 3"),
    "negative stages": (dict(XBLOCK=128, num_warps=4, num_stages=-5), "num_stages -5 is outside [1, 8]"),
    "100 stages": (dict(XBLOCK=128, num_warps=4, num_stages=100), "num_stages 100"),
    "no launch options": (dict(XBLOCK=128), "lacks num_warps or num_stages"),
}


@pytest.mark.parametrize("case", KERNELS)
def test_inductor_triton_configs_are_launchable(case: str) -> None:
    config, message = KERNELS[case]
    assert triton_config_problem(dict(XBLOCK=128, R0_BLOCK=8, num_warps=4, num_stages=1)) is None
    problem = kernel_problem(_kernel(TRITON, 0.0, **config))
    assert problem is not None and message in problem, problem


def test_kernel_latencies_are_above_zero_and_launches_sane() -> None:
    assert kernel_problem(_kernel("matmul_kernel", 0.5, BLOCK_M=128, num_warps=8)) is None
    assert kernel_problem(_kernel(TRITON, 0.0, XBLOCK=128, num_warps=4, num_stages=1)) is None   # untimed: allowed
    for latency in (0.0, -1.0, float("inf"), float("nan")):
        assert "latency_ms" in kernel_problem(_kernel("matmul_kernel", latency, BLOCK_M=128))
    assert "num_warps 0" in kernel_problem(_kernel("matmul_kernel", 0.5, BLOCK_M=128, num_warps=0))
    gemm = "inductor-gemm:" + "a" * 32
    assert kernel_problem(_kernel(gemm, 0.5, **{"choice": "triton_mm_3", "ms:triton_mm_3": 0.1})) is None
    assert "names its winner as text" in kernel_problem(_kernel(gemm, 0.5, choice=3))


ESCAPES = {"clipboard write (OSC 52)": "\x1b]52;c;cm0gLXJmIH4=\x07", "line erase": "alice\x1b[2K\r",
           "C1 CSI": "bob\x9b2K", "NUL": "a\x00b", "DEL": "a\x7f"}


@pytest.mark.parametrize("case", ESCAPES)
def test_control_characters_are_refused_in_every_stored_string(case: str) -> None:
    text = ESCAPES[case]
    assert "control character" in control_problem(text, "user")
    assert "control character" in best_problem(best(W, CPU, user=text), CPU)
    assert "control character" in best_problem(best(W, CPU, params={"max_autotune_gemm_backends": text,
                                                                    "max_autotune": True}), CPU)
    assert "control character" in kernel_problem(replace(_kernel("matmul_kernel", BLOCK_M=128), host=text))
    assert "control character" in kernel_problem(_kernel("matmul_kernel", BLOCK_M=128, note=text))
    assert control_problem("plain text: alice@box", "user") is None


# -- at lookup: the same rows, stored as any teammate could, are skipped with one warning ---------

AT_LOOKUP = {
    "CUDA-only value": (dict(params={"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}),
                        "max_autotune_gemm_backends: value 'TRITON'"),
    "unsafe CUDA knob": (dict(params={"assume_32bit_indexing": True}, unsafe=True), "assume_32bit_indexing"),
    "ci_low 1e300": (dict(params={"max_fusion_size": 8}, ci_low=1e300, speedup=1e300, ci_high=1e300),
                     "ci_high <= 100"),
    "speedup outside its interval": (dict(params={"max_fusion_size": 8}, speedup=9.0), "ci_low <= speedup"),
    "terminal escape in user": (dict(params={"max_fusion_size": 8}, user="\x1b]52;c;aGk=\x07"),
                                "user contains the control character U+001B"),
}


@pytest.mark.parametrize("case", AT_LOOKUP)
def test_a_row_that_fails_the_check_is_skipped_at_lookup_with_one_warning(case: str, tmp_path: Path) -> None:
    from tuner.inductor import CompileConfig
    from tuner.lookup import Lookup, LookupWarning
    from tuner.lookup.decision import Tier
    from tuner.platform import current_platform
    from tuner.settings import Settings

    fields, message = AT_LOOKUP[case]
    here, url = current_platform("cpu"), f"sqlite:///{tmp_path / 'tuner.db'}"
    row = replace(best(W, here, ci_low=1.1, speedup=1.2), **fields)
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(here)
        store.ensure_workload(W)
        store.save_best(row)
    lookup = Lookup(Settings(db_url=url))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decisions = [lookup.decide(W.graphs[0].key, here) for _ in range(2)]
    said = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert decisions[0].tier is Tier.UNAVAILABLE and decisions[0].config == CompileConfig()
    assert len(said) == 1 and message in said[0] and "not one this cpu platform can apply" in said[0], said
    assert "\x1b" not in said[0]


def test_an_inductor_triton_config_that_cannot_launch_is_skipped_at_lookup(tmp_path: Path) -> None:
    from tuner.lookup import Lookup, LookupWarning
    from tuner.platform import current_platform
    from tuner.settings import Settings
    from tuner.storage import save_kernel_config

    here, url = current_platform("cpu"), f"sqlite:///{tmp_path / 'tuner.db'}"
    name = TRITON[: len("inductor-triton:")] + W.graphs[0].key
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(here)
        for key, config in (("bad", dict(XBLOCK=3, num_warps=0, num_stages=-5)),
                            ("good", dict(XBLOCK=64, num_warps=4, num_stages=1))):
            save_kernel_config(store, replace(_kernel(name, 0.0, **config), kernel_key=key, platform_key=here.key,
                                              key_args=(("lookup_hash", key),)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = Lookup(Settings(db_url=url)).triton_table(W.graphs[0].key, here.key)
    said = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert table == {"good": dict(XBLOCK=64, num_warps=4, num_stages=1)}, table
    assert len(said) == 1 and "XBLOCK 3 is not a power of two" in said[0], said


# -- unsafe rows need the compile call's opt-in -------------------------------------------------

def test_an_unsafe_row_applies_only_with_the_opt_in(tmp_path: Path, inductor_calls: list[dict],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    import tuner
    from tuner.lookup import backend
    from tuner.platform import current_platform

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu"), {"max_fusion_size": 8}, unsafe=True)
    monkeypatch.setattr(backend, "_said_precision", False)
    model, x = tiny_model_and_input(3)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="tuner.lookup"):
        for _ in range(2):                       # the message is said once per process
            torch._dynamo.reset()
            torch.testing.assert_close(tuner.compile(model, db=url)(x), model(x))
        plain = [c["patches"].get("max_fusion_size") for c in inductor_calls if c["outer"]]
        torch._dynamo.reset()
        del inductor_calls[:]
        torch.testing.assert_close(tuner.compile(model, db=url, unsafe=True)(x), model(x))
        opted = [c["patches"].get("max_fusion_size") for c in inductor_calls if c["outer"]]
    said = [r.getMessage() for r in caplog.records if "--unsafe" in r.getMessage()]
    assert plain and set(plain) == {None}, plain                 # Inductor's defaults without the opt-in
    assert opted and set(opted) == {8}, opted                    # the stored config with it
    assert len(said) == 1 and "opt in with options={'unsafe': True} or tuner.compile(model, unsafe=True)" in said[0]


def test_save_best_flags_a_row_whose_knobs_are_unsafe(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(CPU)
        store.ensure_workload(W)
        store.save_best(best(W, CPU, params={"cpp.simdlen": 256}, unsafe=False))
        assert store.best_config(W.graphs[0].key, CPU.key).unsafe is True


# -- stored strings and numbers reach terminals and pages as data ----------------------------------

def _raw_row(tmp_path: Path, **columns: object) -> str:
    """A database whose one best config was then changed with plain SQL, as any teammate with
    write access to a shared SQLite file can."""
    path = tmp_path / "shared.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(CPU)
        store.ensure_workload(W)
        store.save_best(best(W, CPU))
    with sqlite3.connect(path) as connection:
        for name, value in columns.items():
            connection.execute(f"UPDATE best_configs SET {name} = ?", (value,))
    return url


def test_db_ls_shows_a_stored_escape_sequence_as_text(tmp_path: Path) -> None:
    url = _raw_row(tmp_path, user="\x1b]52;c;cm0gLXJmIH4=\x07eve\x1b[2K")
    done = run_main("db", "ls", "--db", url)
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07eve" in shown


def test_the_report_escapes_every_stored_value_numbers_included(tmp_path: Path) -> None:
    from tuner.report.tables import best_html

    attack = "<img src=x onerror=alert(1)>"
    url = _raw_row(tmp_path, rounds=attack, speedup=attack, user="<b>eve</b>")
    with Store.open(url) as store:
        stored = store.snapshot().bests
    assert stored[0].rounds == attack            # SQLite keeps text in an INTEGER column
    page = best_html(stored, 1)
    assert "<img" not in page and "<b>eve" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;eve&lt;/b&gt;" in page


# -- a malformed kernel row (written with SQL) is skipped, never raised into the user's compile ------

MALFORMED = {"config as a JSON list": ("config", "[128, 4]"), "config as a JSON string": ("config", '"XBLOCK"'),
             "key_args as a number": ("key_args", "7"), "latency as text": ("latency_ms", "fast"),
             "config not JSON": ("config", "{not json")}


@pytest.mark.parametrize("case", MALFORMED)
def test_gemm_winner_and_triton_table_skip_a_malformed_row(case: str, tmp_path: Path) -> None:
    from tuner.inductor import gemm_choices, triton_choices
    from tuner.lookup import Lookup, LookupWarning
    from tuner.platform import current_platform
    from tuner.settings import Settings
    from tuner.storage import save_kernel_config

    column, value = MALFORMED[case]
    here, path = current_platform("cpu"), tmp_path / "tuner.db"
    upgrade(f"sqlite:///{path}")
    graph, gemm = W.graphs[0].key, "g" * 32
    with Store.open(f"sqlite:///{path}") as store:
        store.ensure_platform(here)
        save_kernel_config(store, replace(_kernel(triton_choices.KERNEL_PREFIX + graph, 0.0, XBLOCK=64, num_warps=4,
                                                  num_stages=1), platform_key=here.key, key_args=(("lookup_hash", "h"),)))
        save_kernel_config(store, replace(_kernel(gemm_choices.KERNEL_PREFIX + gemm, 0.5, choice="triton_mm_1"),
                                          kernel_key=gemm, platform_key=here.key))
    with sqlite3.connect(path) as connection:
        connection.execute(f"UPDATE kernel_configs SET {column} = ?", (value,))
    lookup = Lookup(Settings(db_url=f"sqlite:///{path}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lookup.triton_table(graph, here.key) == {}
        assert lookup.gemm_winner(gemm, here.key) is None
    said = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert len(said) == 1 and "stored kernel config" in said[0] and "Inductor tunes" in said[0], said
