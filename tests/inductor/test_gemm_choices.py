"""CPU GEMM template choices: harvested where a config is measured, replayed at lookup.

Process A (this test process, in an empty Inductor cache) prepares a freezing + max_autotune
config of a one-linear model through `tuner.measure.prepare`, the trial's own path, which
harvests the GEMM Inductor autotunes into the SQLite file; the test stores that config as the
graph's best. Process B (a fresh subprocess, started first so that its start-up overlaps A's
compile, then waiting for A's go) compiles the same model with `tuner.compile(db=...)`;
it shares A's Inductor cache (compiled C++ is reused, which saves half its time) with Inductor's
own autotune cache turned off, so only the database can spare it the benchmark. Both count
autotuned GEMMs with Inductor's own counter (`select_algorithm_autotune`): A autotunes one, B
none, and B's log says its one GEMM took the stored choice; B's output equals A's bit for bit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import MODELS
from helpers.stored import store_configs

ONE_LINEAR = MODELS / "one_linear.py"
PARAMS = {"max_autotune": True, "freezing": True}

# Recorded by process A of the test below (torch 2.13.0+cpu, 2 threads): its harvested GEMM, as stored.
RECORDED = dict(
    op="packed_linear", key="aa777e2253f5a91b751b228359d3e51c",
    inputs="[('cpu', 'torch.float32', 8, 32, 32, 1, 0), ('cpu', 'torch.float32', 1459233, 1, 1, 0, 0), "
           "('cpu', 'torch.float32', 48, 32, 32, 1, 0)]",
    timings=(("CppMicroGemmFP32Vec-ctsxazgrkattazxnrr7pdtr7uo2htsxgy467575zf5s3vsgvigc5", 0.003887000048052869),
             ("_mkl_linear-B=None-batch_size=8-ckf3uyooeooudwfiokidg5pgkvanrzwao362tmivjdttmnvryzcv",
              0.01934099998379679)))

PROGRAM = textwrap.dedent('''
    import json, logging, pathlib, time
    import torch
    import torch._inductor.config
    from torch._dynamo.utils import counters
    import tuner
    from tuner.workload import load_model_file
    from tuner.platform import current_platform

    import torch._inductor.compile_fx, torch._inductor.select_algorithm, tuner.storage   # noqa: E401
    current_platform("cpu")                      # imports and the platform probe overlap process A
    go = pathlib.Path({go!r})
    deadline = time.monotonic() + 300
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("process A never said go")
        time.sleep(0.05)

    torch._inductor.config.autotune_local_cache = False     # only tuner's database may answer
    logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
    logging.getLogger("tuner.lookup").setLevel(logging.INFO)
    loaded = load_model_file({path!r}, seed=0)
    with torch.no_grad():
        tuned = tuner.compile(loaded.model, db={db!r})
        loaded.call(tuned)                      # the lookup's first call: decides, runs uncompiled
        out = loaded.call(tuned)                # the frozen compile, fed from the database
    print("REPORT " + json.dumps(dict(autotuned=counters["inductor"]["select_algorithm_autotune"],
                                      out=out.flatten().tolist())))
''')


@pytest.mark.slow
def test_harvested_gemm_is_not_benchmarked_again_in_another_process(tmp_path: Path) -> None:
    from torch._dynamo.utils import counters
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    from tuner.inductor.gemm_choices import KERNEL_PREFIX
    from tuner.measure import Rejected, prepare
    from tuner.platform import current_platform
    from tuner.storage import Store, kernel_configs, upgrade
    from tuner.trial import MeasureSpec
    from tuner.workload import capture_workload, load_model_file

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    go = tmp_path / "go"          # B starts now and waits for it: its start-up overlaps A's compile
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(path=str(ONE_LINEAR), db=url, go=str(go)))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
           "OMP_NUM_THREADS": str(torch.get_num_threads())}
    process_b = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    try:
        counters.clear()
        with temporary_cache_dir(str(tmp_path / "inductor-cache")):
            runner = prepare(MeasureSpec(str(ONE_LINEAR), kernel_db=url), tuple(sorted(PARAMS.items())))
            assert not isinstance(runner, Rejected), runner
            with torch.no_grad():
                expected = runner.call().flatten().tolist()
        assert counters["inductor"]["select_algorithm_autotune"] == 1
        platform = current_platform("cpu")
        with Store.open(url) as store:
            harvested = [k for k in kernel_configs(store, platform_key=platform.key)
                         if k.kernel_name.startswith(KERNEL_PREFIX)]
        assert len(harvested) == 1, harvested
        timings = {name: ms for name, ms in harvested[0].config if name.startswith("ms:")}
        assert len(timings) == harvested[0].configs_tried >= 2        # the template and the mkl extern
        store_configs(url, capture_workload(load_model_file(ONE_LINEAR)), platform, PARAMS)
    except BaseException:
        process_b.kill()
        process_b.communicate()
        raise
    go.touch()
    stdout, stderr = process_b.communicate(timeout=600)
    assert process_b.returncode == 0, stderr[-3000:]
    report = json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("REPORT ")).split(" ", 1)[1])
    assert report["autotuned"] == 0, stderr[-3000:]
    assert "1 GEMM(s) took their stored choice, 0 autotuned by Inductor" in stderr, stderr[-3000:]
    assert report["out"] == expected


def test_recorded_harvest_round_trips_through_the_database_to_the_feed(tmp_path: Path) -> None:
    from tuner.inductor.gemm_choices import GemmChoice, chosen
    from tuner.lookup import Lookup
    from tuner.platform import current_platform
    from tuner.settings import Settings
    from tuner.storage import Store, save_kernel_config, upgrade

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    recorded = GemmChoice(**RECORDED)
    platform = current_platform("cpu")
    with Store.open(url) as store:
        store.ensure_platform(platform)
        assert save_kernel_config(store, recorded.to_record(platform, user="test", host="test"))
    lookup = Lookup(Settings(db_url=url), warn=False)
    winner = lookup.gemm_winner(recorded.key, platform.key)
    assert winner == recorded.winner == RECORDED["timings"][0][0]
    assert lookup.gemm_winner(recorded.key, "another-platform") is None
    assert lookup.gemm_winner("0" * 32, platform.key) is None
    names = [name for name, _ in RECORDED["timings"]]
    assert chosen(names, winner) == 0
    assert chosen(list(reversed(names)), winner) == 1
    assert chosen(names[1:], winner) is None             # the winner is not among this compile's choices
    assert chosen(names, None) is None
