"""Compile-time lookup: the stored config reaches Inductor in another process, tiers, misses, explain.

Process A (this test process) stores a config through the real Store API; process B (a
fresh subprocess) builds the same model with new weights and compiles it. B's probe is
the user program's own: it wraps `torch._inductor.compile_fx.compile_fx`, which Inductor
re-enters with the config patches active, and records the live Inductor config there.
No tuner code is involved in the probe, and the plain-backend B never imports tuner.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import MODELS, cli_env
from helpers.stored import STORED, TINY, UNFROZEN, store_configs, tiny_workload


# -- helpers shared with test_backend_faults.py ---------------------------------------


def model_file(tmp: Path, batch: int) -> Path:
    """The tiny MLP with another batch size (another workload key), same name."""
    folder = tmp / f"b{batch}"
    folder.mkdir(exist_ok=True)
    path = folder / "tiny_mlp.py"
    path.write_text(TINY.read_text().replace("torch.randn(8, 32)", f"torch.randn({batch}, 32)"))
    return path


PROBE = textwrap.dedent('''
    import json, logging, sys
    import torch
    import torch._inductor.compile_fx as cfx
    sys.path.insert(0, {models!r})
    import tiny_mlp

    logging.basicConfig(level=logging.WARNING, format="LOG %(levelname)s %(name)s %(message)s")
    logging.getLogger("tuner.lookup").setLevel(logging.INFO)
    seen, original = [], cfx.compile_fx

    def probe(gm, example_inputs, *args, **kwargs):
        # Inductor re-enters compile_fx with its config_patches applied: record the live values.
        from torch._inductor import config
        seen.append(dict(patches=sorted((kwargs.get("config_patches") or {{}}).items()),
                         max_fusion_size=config.max_fusion_size, freezing=config.freezing,
                         get_attr=sum(n.op == "get_attr" for n in gm.graph.nodes)))
        return original(gm, example_inputs, *args, **kwargs)

    cfx.compile_fx = probe
    torch.manual_seed(123)                       # other weights than process A's
    report = dict(tuner_imported="tuner" in sys.modules)

    def run(label, model, compiled, x, calls=1, grad=False):
        start = len(seen)
        with torch.set_grad_enabled(grad):
            for _ in range(calls):
                out = compiled(x)
            ref = model(x)
        report[label] = dict(err=float((out - ref).abs().max()), compiles=seen[start:])
''')


def run_probe(body: str, env: dict[str, str], tmp: Path) -> tuple[dict, str]:
    script = tmp / "program.py"
    script.write_text(PROBE.format(models=str(MODELS)) + textwrap.dedent(body) +
                      "\nprint('REPORT ' + json.dumps(report))\n")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT ")), out.stderr


# -- fixtures ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory):
    """Process A: the tiny MLP (batch 8) tuned on this platform with STORED."""
    from tuner.platform import current_platform

    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'tuner.db'}"
    workload = tiny_workload()
    platform = current_platform("cpu")
    store_configs(url, workload, platform, STORED, unfrozen_params=UNFROZEN)
    return url, workload, platform


# -- across processes --------------------------------------------------------------

@pytest.mark.slow
def test_plain_backend_applies_the_stored_config_in_a_fresh_process_and_misses_another_batch(
        seeded, tmp_path: Path) -> None:
    url, workload, _ = seeded
    report, stderr = run_probe('''
        model = tiny_mlp.get_model()
        run("hit", model, torch.compile(model, backend="tuner"), torch.randn(8, 32))
        torch._dynamo.reset()
        run("grad", model, torch.compile(model, backend="tuner"), torch.randn(8, 32), grad=True)
        torch._dynamo.reset()
        run("miss", model, torch.compile(model, backend="tuner"), torch.randn(16, 32))
    ''', cli_env(TUNER_DB=url, TUNER_EXPLAIN="1"), tmp_path)

    assert report["tuner_imported"] is False
    hit = report["hit"]["compiles"]
    # grad off: the backend freezes itself, the weights bound as constants (get_attr) in one trace
    assert dict(map(tuple, hit[0]["patches"])) == STORED
    assert hit[-1]["max_fusion_size"] == 8 and hit[-1]["freezing"] is True  # in effect while Inductor compiles
    assert hit[0]["get_attr"] > 0
    assert report["hit"]["err"] < 1e-4
    # grad on: another graph (keys carry the grad mode, and freezing is for inference only): a miss
    grad = report["grad"]["compiles"]
    assert grad and all(c["patches"] == [] and c["freezing"] is False for c in grad)
    assert report["grad"]["err"] < 1e-4
    miss = report["miss"]["compiles"]
    assert all(c["patches"] == [] and c["max_fusion_size"] == 64 for c in miss)
    assert report["miss"]["err"] < 1e-4

    logs = [ln for ln in stderr.splitlines() if ln.startswith("LOG ")]
    assert len([ln for ln in logs if "miss:" in ln]) == 2, logs
    assert len([ln for ln in logs if f"key {workload.graphs[0].key[:12]}): exact hit" in ln]) == 1, logs
    assert not [ln for ln in logs if "measured without freezing" in ln], logs
    assert not [ln for ln in logs if "WARNING" in ln] and "LookupWarning" not in stderr
    # TUNER_EXPLAIN=1: the decision per graph, printed once per graph
    assert len(re.findall(r"^tuner: graph \d+: exact hit", stderr, re.M)) == 1
    assert len(re.findall(r"^tuner: graph \d+: miss", stderr, re.M)) == 2
    assert "applies: max_fusion_size=8, freezing=True (inference only" in stderr
    assert f"nearest: graph {workload.graphs[0].key}" in stderr                # the miss names the batch-8 graph
    assert "float32[16,32] here, float32[8,32] there" in stderr


@pytest.mark.slow
def test_tuner_compile_and_install_apply_freezing_in_one_trace(seeded, tmp_path: Path) -> None:
    url, _, _ = seeded
    report, stderr = run_probe('''
        import tuner
        model = tiny_mlp.get_model()
        run("compile", model, tuner.compile(model), torch.randn(8, 32), calls=3)
        tuner.install()
        torch._dynamo.reset()
        other = tiny_mlp.get_model()
        run("install", other, torch.compile(other), torch.randn(8, 32))
    ''', cli_env(TUNER_DB=url), tmp_path)

    frozen = [c for c in report["compile"]["compiles"] if c["patches"]]    # not Inductor's own re-entry
    # the first call compiles frozen (parameters bound as constants); later calls compile nothing
    assert len(frozen) == 1 and frozen[0]["get_attr"] > 0
    assert dict(map(tuple, frozen[0]["patches"])) == STORED
    assert report["compile"]["compiles"][-1]["freezing"] is True     # live while Inductor compiles
    assert report["compile"]["err"] < 1e-4
    installed = report["install"]["compiles"]
    assert installed[-1]["max_fusion_size"] == 8 and installed[-1]["freezing"] is True
    assert report["install"]["err"] < 1e-4
    assert "LookupWarning" not in stderr


# -- tiers, in process -------------------------------------------------------------

def test_user_mode_and_options_are_the_base_and_the_stored_config_wins(seeded, monkeypatch) -> None:
    """Inductor is replaced by a recorder here: what matters is the patches it would get."""
    import torch._inductor.compile_fx as cfx

    from tuner.lookup import Lookup
    from tuner.lookup.backend import TunerBackend
    from tuner.settings import Settings

    url, _, _ = seeded
    received = []

    def record(gm, example_inputs, config_patches=None, **kwargs):
        received.append(dict(config_patches or {}))
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", record)
    sys.path.insert(0, str(MODELS))
    try:
        import tiny_mlp
    finally:
        sys.path.remove(str(MODELS))
    lookup = Lookup(Settings(db_url=url))
    with torch.no_grad():
        for how in (dict(mode="max-autotune-no-cudagraphs"),              # torch.compile takes one or the other
                    dict(options={"max_fusion_size": 32, "epilogue_fusion": False})):
            torch._dynamo.reset()
            torch.compile(tiny_mlp.get_model(), backend=TunerBackend(lookup=lookup), **how)(torch.randn(8, 32))
    torch._dynamo.reset()
    # the stored config (freezing included: grad is off) on top of the user's mode or options
    assert received == [{"max_autotune": True, "coordinate_descent_tuning": True,   # the user's mode
                         "max_fusion_size": 8, "freezing": True},                   # plus the stored knobs
                        {"epilogue_fusion": False,                                  # the user's option stays
                         "max_fusion_size": 8, "freezing": True}]                   # stored beats the user's 32


def test_exact_tier_and_the_cache(seeded) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.settings import Settings

    url, workload, platform = seeded
    lookup = Lookup(Settings(db_url=url))
    decision = lookup.decide(workload.graphs[0].key, platform)
    assert decision.tier is Tier.EXACT
    assert dict(decision.config.inductor) == {"max_fusion_size": 8} and decision.config.freezing
    assert dict(decision.unfrozen.inductor) == UNFROZEN and not decision.unfrozen.freezing
    assert lookup.decide(workload.graphs[0].key, platform) is decision       # cached per process


def test_same_hardware_other_software_after_revalidation(seeded, tmp_path: Path) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.platform import platform_from_parts
    from tuner.settings import Settings

    _, workload, here = seeded
    url = f"sqlite:///{tmp_path / 'tier2.db'}"
    older = platform_from_parts("cpu", dict(here.hardware), {**dict(here.software), "torch": "2.12.0+cpu"})
    newer = platform_from_parts("cpu", dict(here.hardware), {**dict(here.software), "torch": "2.99.0+cpu"})
    elsewhere = platform_from_parts("cpu", {**dict(here.hardware), "threads": "999"}, dict(here.software))
    store_configs(url, workload, older, {"max_fusion_size": 16})
    store_configs(url, workload, newer, {"knob_only_in_torch_2_99": True})   # fails re-validation here
    store_configs(url, workload, elsewhere, {"max_fusion_size": 32})

    decision = Lookup(Settings(db_url=url)).decide(workload.graphs[0].key, here)
    assert decision.tier is Tier.SAME_HARDWARE
    assert dict(decision.config.inductor) == {"max_fusion_size": 16}
    assert decision.source is not None and decision.source.key == older.key
    why = {e.platform.key: e.why_not for e in decision.elsewhere}
    assert "knob_only_in_torch_2_99" in why[newer.key] and "rejected" in why[newer.key]
    assert "other hardware" in why[elsewhere.key] and "threads" in why[elsewhere.key]


def test_a_miss_names_the_same_graph_elsewhere(seeded, tmp_path: Path) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.platform import platform_from_parts
    from tuner.settings import Settings

    _, workload, here = seeded
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    other = platform_from_parts("cpu", {**dict(here.hardware), "cpu_model": "Other CPU"}, dict(here.software))
    store_configs(url, workload, other, {"max_fusion_size": 16})
    decision = Lookup(Settings(db_url=url)).decide(workload.graphs[0].key, here)
    assert decision.tier is Tier.MISS and decision.config.is_default
    assert [e.platform.key for e in decision.elsewhere] == [other.key]
    assert "cpu_model" in decision.elsewhere[0].why_not


# -- tuner explain ---------------------------------------------------------------------

def run_explain(*args: str, settings_url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    import argparse

    from tuner.cli.explain import add_explain_parser
    from tuner.settings import Settings

    parser = argparse.ArgumentParser(prog="tuner")
    add_explain_parser(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["explain", *args])
    code = ns.func(ns, replace(Settings.from_env({}), db_url=settings_url))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_explain_names_the_tier(seeded, capsys: pytest.CaptureFixture[str]) -> None:
    url, workload, _ = seeded
    code, out, _ = run_explain(str(TINY), settings_url=url, capsys=capsys)
    assert code == 0
    assert "graph 0: exact hit" in out and workload.graphs[0].key in out
    assert "applies: max_fusion_size=8, freezing=True (inference only" in out


def test_explain_on_a_miss_names_the_nearest_keys(seeded, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url, workload, _ = seeded
    code, out, _ = run_explain(str(model_file(tmp_path, 16)), settings_url=url, capsys=capsys)
    assert code == 0
    assert "graph 0: miss" in out
    assert "nearest:" in out and workload.graphs[0].key[:12] in out          # the batch-8 graph


def test_explain_without_a_database_is_an_error_naming_the_fix(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from tuner.errors import StorageError

    url = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(StorageError, match="tuner db upgrade"):
        run_explain(str(TINY), settings_url=url, capsys=capsys)
    assert not (tmp_path / "none.db").exists()


def test_import_tuner_stays_light() -> None:
    """`tuner.compile` loads torch (it is torch.compile) but no database or search library, and the
    lookup's face (the backend's entry point) loads not even torch until a graph is compiled."""
    heavy = "('torch', 'sqlalchemy', 'optuna', 'ray', 'alembic')"
    for code in ("import sys, tuner; tuner.compile", "import sys, tuner.lookup"):
        out = subprocess.run([sys.executable, "-c", f"{code}; print(sorted(m for m in {heavy} if m in sys.modules))"],
                             capture_output=True, text=True, timeout=120, env=cli_env())
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == ("['torch']" if "compile" in code else "[]"), code

