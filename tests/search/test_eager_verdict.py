"""Eager as the floor, for real: a model that is faster uncompiled is stored as "eager", and
`torch.compile(model, backend="tuner")` then runs it uncompiled, with eager's exact output."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import MODELS, cli_env
from tuner.search import Execution, SearchOptions, run_search
from tuner.settings import Settings
from tuner.storage import Store
from tuner.trial import MeasureSpec

SMALL = MODELS / "small_matmuls.py"

CHECK = f"""
import logging, sys, torch
sys.path.insert(0, {str(MODELS)!r})
import small_matmuls as m
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
torch.manual_seed(0)
model, inputs = m.get_model(), m.get_inputs()
with torch.no_grad():
    expected = model(*inputs)
    got = torch.compile(model, backend="tuner")(*inputs)
print("identical" if torch.equal(got, expected) else "differs")
"""


@pytest.mark.slow
def test_a_model_faster_uncompiled_is_stored_as_eager_and_runs_eagerly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    options = SearchOptions(MeasureSpec(str(SMALL), repeat=8), trials=1, rounds=12)   # eager is in every selection
    result, = run_search(options, execution=Execution("local"), settings=Settings(db_url=url, user="tester"))
    assert result.verdict.eager, result.verdict
    assert result.verdict.claim.clears_noise
    with Store.open(url) as store:
        graph = result.target.workload.graphs[0]
        best = store.best_config(graph.key, result.target.platform.key)
    assert best.eager and best.params == {} and not best.is_default and best.ci_low > 1.0

    ran = subprocess.run([sys.executable, "-c", CHECK], env=cli_env(TUNER_DB=url), capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "identical" in ran.stdout
    assert "eager won" in ran.stdout, ran.stdout
