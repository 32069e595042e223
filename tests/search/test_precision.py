"""Precision as an opt-in search dimension (`tuner search --precision ... --tolerance ...`).

Real trials (`tuner.measure.run_trial`), a real short search and real compiles in a fresh
process for the lookup; nothing is mocked. On this CPU (no AVX512-BF16) bfloat16 is slower
than fp32, so a search here keeps fp32; the lookup tests store a bf16-autocast config directly.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import MODELS, cli_env
from helpers.stored import store_configs, tiny_workload
from tuner.errors import UsageError

TINY = MODELS / "tiny_mlp.py"
AUTOCAST = {"precision": "bf16-autocast"}


# -- names, flags and the space --------------------------------------------------------

def test_modes_flags_and_the_space() -> None:
    from tuner.precision import check_tolerance, parse_precisions
    from tuner.search import SearchOptions
    from tuner.search_spaces import load_space
    from tuner.trial import MeasureSpec

    assert parse_precisions("bf16,fp32,bf16") == ("fp32", "bf16")
    with pytest.raises(UsageError, match="unknown precision 'int8'; choose from: fp32, tf32, bf16-autocast"):
        parse_precisions("fp32,int8")
    with pytest.raises(UsageError, match="give the largest relative error to accept, e.g. --tolerance 1e-2"):
        SearchOptions(MeasureSpec("m.py"), trials=3, precision=("fp32", "bf16"))
    with pytest.raises(UsageError, match="--tolerance applies to reduced precision only"):
        check_tolerance(("fp32",), 1e-2)
    with pytest.raises(UsageError, match="for CUDA models only"):
        load_space("cpu", precision=("fp32", "tf32"))

    plain, space = load_space("cpu"), load_space("cpu", precision=("fp32", "bf16-autocast"))
    assert load_space("cpu", precision=("fp32",)).hash == plain.hash          # nothing changes without it
    assert "precision" not in {k.name for k in plain.knobs}
    assert space.knob("precision").choices == ("fp32", "bf16-autocast") and space.knob("precision").default == "fp32"
    assert space.candidate(space.seeds()[-1]).as_dict() == AUTOCAST
    assert space.candidate(space.default_params()).is_default                # fp32 is never in a candidate


def test_relative_error_is_norm_wise() -> None:
    from tuner.measure.accuracy import accuracy_problem, relative_error

    ref = torch.tensor([1.0, -4.0, 0.5])
    assert relative_error(ref, ref + torch.tensor([0.0, 0.04, 0.0])) == pytest.approx(0.01)
    assert relative_error(ref, torch.tensor([1.0, float("nan"), 0.5])) == float("inf")
    assert relative_error(torch.zeros(2), torch.tensor([0.0, 1e-30])) > 1e7     # zeros: any difference is huge
    problem, _ = accuracy_problem([ref], [ref.to(torch.bfloat16)])
    assert problem is not None and "eager" in problem


# -- the accuracy constraint, in real trials ---------------------------------------------

@pytest.mark.parametrize("mode", ["bf16-autocast", "bf16"])
def test_tight_tolerance_rejects_and_loose_accepts(mode: str) -> None:
    from tuner.measure import run_trial
    from tuner.trial import MeasureSpec, Status, TrialRequest

    def trial(tolerance: float):
        spec = MeasureSpec(str(TINY), tolerance=tolerance, repeat=3, min_rounds=2, budget_s=1.0)
        return run_trial(TrialRequest(spec, (("precision", mode),)))

    tight = trial(1e-6)
    assert tight.status is Status.WRONG_RESULT, tight.error
    assert tight.error.startswith(f"precision {mode}: max relative error ")
    assert "exceeds --tolerance 1e-06 (on 1 input set)" in tight.error
    loose = trial(5e-2)
    assert loose.status is Status.OK, loose.error
    assert loose.error.endswith("within --tolerance 0.05 (on 4 input sets)")   # the file's inputs + 3 fresh sets
    error = float(loose.error.split("max relative error ")[1].split()[0])
    assert 1e-4 < error < 5e-2                                                 # bfloat16 really ran


@pytest.mark.slow
def test_a_search_measures_and_records_the_precision(tmp_path: Path) -> None:
    from tuner.search import Execution, SearchOptions, run_search
    from tuner.settings import Settings
    from tuner.trial import MeasureSpec

    space = tmp_path / "space.json"
    space.write_text(json.dumps({"name": "tiny", "knobs": [
        {"name": "max_fusion_size", "kind": "choice", "choices": [16, 64]}]}))
    db = tmp_path / "t.db"
    options = SearchOptions(MeasureSpec(str(TINY), repeat=3, tolerance=5e-2), trials=2, rounds=12, runtime_knobs=False,
                            space=str(space), precision=("fp32", "bf16-autocast"), warm_start=False)
    [result] = run_search(options, execution=Execution("local"), settings=Settings(db_url=f"sqlite:///{db}"))
    assert result.target.space.name == "tiny+precision"
    by_params = {json.dumps(r.params, sort_keys=True): r.measurement for r in result.outcome.trials}
    measured = by_params[json.dumps(AUTOCAST)]
    assert measured.ok and "max relative error" in measured.error and measured.speedup is not None
    with sqlite3.connect(db) as conn:
        stored = [json.loads(p) for (p,) in conn.execute("SELECT params FROM trials")]
    assert AUTOCAST in stored and {} in stored


# -- lookup: the opt-in ------------------------------------------------------------------

def test_backend_choice_needs_the_same_precision() -> None:
    from tuner.inductor import compile_config
    from tuner.lookup.choice import Applies, backend_choice
    from tuner.lookup.decision import Decision, Tier

    decision = Decision(graph_key="g", platform=None, tier=Tier.EXACT, config=compile_config(AUTOCAST), reason="")
    for opted in ("fp32", "bf16"):
        choice = backend_choice(decision, can_freeze=False, precision=opted)
        assert choice.applies is Applies.NOT_OPTED_IN and choice.config.is_default
        assert "opt in with options={'precision': 'bf16-autocast'}" in choice.note
    assert backend_choice(decision, can_freeze=False, precision="bf16-autocast").config.precision == "bf16-autocast"


def test_the_exchange_allow_list_takes_precision() -> None:
    from tuner.storage.exchange_records import Invalid, check_params

    check_params(dict(AUTOCAST), "record 0")
    with pytest.raises(Invalid, match="precision"):
        check_params({"precision": "int8"}, "record 0")


PROGRAM = textwrap.dedent('''
    import json, logging, sys
    import torch
    import torch._inductor.compile_fx as cfx
    sys.path.insert(0, {models!r})
    import tiny_mlp

    logging.basicConfig(level=logging.WARNING, format="LOG %(levelname)s %(name)s %(message)s")
    seen, original = [], cfx.compile_fx

    def probe(gm, example_inputs, *args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))    # Inductor compiles under autocast or not
        return original(gm, example_inputs, *args, **kwargs)

    cfx.compile_fx = probe
    torch.manual_seed(123)
    model, x, report = tiny_mlp.get_model(), torch.randn(8, 32), {{}}

    def run(label, compiled):
        start = len(seen)
        with torch.no_grad():
            compiled(x)
            out, ref = compiled(x), model(x)
        report[label] = dict(dtype=str(out.dtype), err=float((out - ref).abs().max() / ref.abs().max()),
                             autocast=any(seen[start:]))
        torch._dynamo.reset()

    run("plain", torch.compile(model, backend="tuner"))
    run("other", torch.compile(model, backend="tuner", options={{"precision": "bf16"}}))
    run("opted", torch.compile(model, backend="tuner", options={{"precision": "bf16-autocast"}}))
    import tuner
    run("api", tuner.compile(model, precision="bf16-autocast"))
    print("REPORT " + json.dumps(report))
''')


@pytest.mark.slow
def test_lookup_applies_a_precision_only_where_the_call_opted_in(tmp_path: Path) -> None:
    from tuner.platform import current_platform

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu"), dict(AUTOCAST))
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(models=str(MODELS)))
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cli_env(TUNER_DB=url),
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(next(ln for ln in ran.stdout.splitlines() if ln.startswith("REPORT ")).removeprefix("REPORT "))

    for label in ("plain", "other"):                     # no opt-in, or to another precision: the defaults
        assert not report[label]["autocast"] and report[label]["err"] < 1e-5, report
    for label in ("opted", "api"):                       # opted in: compiled under autocast, outputs stay fp32
        assert report[label]["autocast"] and 1e-4 < report[label]["err"] < 5e-2, report
    assert all(r["dtype"] == "torch.float32" for r in report.values())
    warnings = [ln for ln in ran.stderr.splitlines() if ln.startswith("LOG WARNING")]
    assert len(warnings) == 1, ran.stderr[-3000:]        # said once per process, never raised
    assert "opt in with options={'precision': 'bf16-autocast'}" in warnings[0]
    assert "applying Inductor's defaults" in warnings[0]
