"""Shape buckets (`tuner search model.py --shapes "batch=1,8,32"`): parsing, the model-file contract,
one stored config per bucket, and the lookup of each bucket's config at compile time.

The lookup tests compile in this process with the real backend and a real SQLite store; the
probe is the user program's own: it wraps Inductor's `compile_fx`, which Inductor re-enters with
the config patches active, and records the live config there (as tests/lookup/test_lookup.py does).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from helpers import MODELS, run_main
from helpers.stored import bucket_workload
from helpers.stored import store_configs
from tuner.errors import ModelFileError, UsageError
from tuner.workload import parse_shapes, weighted

BATCHED = MODELS / "batched_mlp.py"
SIZES = (1, 8, 32)
FUSION = {1: 8, 8: 16, 32: 32}        # a distinct stored max_fusion_size per bucket (the default is 64)


# ---------------------------------------------------------------- parsing and the contract

def test_shapes_parse_with_equal_or_given_weights_and_cross_products() -> None:
    equal = parse_shapes("batch=1,8,32")
    assert [b.label() for b in equal.buckets] == ["batch=1", "batch=8", "batch=32"]
    assert [round(b.weight, 6) for b in equal.buckets] == [round(1 / 3, 6)] * 3
    given = parse_shapes("batch=1:6,8:3,32:1")
    assert [b.weight for b in given.buckets] == pytest.approx([0.6, 0.3, 0.1])
    assert weighted(given.buckets, [1.0, 2.0, 10.0]) == pytest.approx(0.6 + 0.6 + 1.0)
    both = parse_shapes("batch=1,8; seq=16:3,64:1")
    assert [b.label() for b in both.buckets] == ["batch=1,seq=16", "batch=1,seq=64", "batch=8,seq=16", "batch=8,seq=64"]
    assert [b.weight for b in both.buckets] == pytest.approx([0.375, 0.125, 0.375, 0.125])


@pytest.mark.parametrize(("text", "message"), [
    ("batch", "--shapes 'batch': 'batch' is not name=size,size,...;"),
    ("batch=1,x", "--shapes 'batch=1,x': 'x' is not size or size:weight;"),
    ("batch=0,8", "--shapes 'batch=0,8': '0' needs a size of at least 1 and a positive weight;"),
    ("batch=1:-2,8", "'1:-2' needs a size of at least 1 and a positive weight;"),
    ("batch=8,8", "--shapes 'batch=8,8' lists batch=8 twice; give each size once"),
    ("batch=1;batch=2", "names dimension batch twice; give each dimension once"),
    ("batch=1,2,3;seq=1,2,3", "gives 9 buckets, more than 8 (Dynamo compiles at most 8 shapes"),
])
def test_a_bad_shapes_text_is_one_usage_line(text: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_shapes(text)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    done = run_main("search", str(BATCHED), "--shapes", text)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_get_inputs_without_the_dimension_is_refused_naming_the_fix(tmp_path: Path) -> None:
    from tuner.workload import load_model_file

    with pytest.raises(ModelFileError) as raised:
        load_model_file(MODELS / "tiny_mlp.py", shape=(("batch", 8),))
    assert str(raised.value) == (f"get_inputs() in {MODELS / 'tiny_mlp.py'} takes no argument 'batch', but --shapes "
                                 f"names it; define `def get_inputs(batch=8):` and build the inputs with that size")
    ignored = tmp_path / "ignores_batch.py"
    ignored.write_text(BATCHED.read_text().replace("torch.randn(batch, 32)", "torch.randn(4, 32)"))
    done = run_main("search", str(ignored), "--shapes", "batch=1,8", "--executor", "local", "--db",
                    f"sqlite:///{tmp_path / 'never.db'}")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"error: get_inputs() in {ignored} returns inputs of the same shapes for batch=1 "
                                   f"and batch=8; build the inputs with the size it is given, e.g. torch.randn(batch, 32)")
    assert not (tmp_path / "never.db").exists()           # refused before anything was written


def test_the_bucket_reaches_get_inputs_in_every_process_through_the_spec() -> None:
    from tuner.trial import MeasureSpec, TrialRequest
    from tuner.workload import load_model_file

    spec = MeasureSpec(str(BATCHED), shape=(("batch", 32),))
    again = TrialRequest.from_json(TrialRequest(spec=spec, params=()).to_json()).spec   # as a trial process reads it
    assert again == spec
    loaded = load_model_file(again.model_path, seed=again.seed, shape=again.shape)
    assert loaded.args[0].shape == (32, 32)
    assert loaded.with_inputs(seed=5).args[0].shape == (32, 32)   # fresh inputs keep the bucket's size
    assert MeasureSpec.from_json({"model_path": "m.py"}).shape == ()


# ---------------------------------------------------------------- lookup per bucket


@pytest.fixture(scope="module")
def bucket_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three buckets' workloads, each with its own stored config, as three bucket searches leave them."""
    from tuner.platform import current_platform
    from tuner.storage import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('shapes') / 'tuner.db'}"
    platform = current_platform("cpu", threads=torch.get_num_threads())
    keys = []
    for batch in SIZES:
        workload = bucket_workload(batch)
        store_configs(url, workload, platform, {"max_fusion_size": FUSION[batch]})
        keys.append(workload.graphs[0].key)
    assert len(set(keys)) == 3                            # each bucket's graph has its own key
    with Store.open(url, readonly=True) as store:
        assert [store.best_config(k, platform.key).params for k in keys] == [
            {"max_fusion_size": FUSION[b]} for b in SIZES]
    return url


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The live max_fusion_size of each graph Inductor compiles in this test (Inductor re-enters
    compile_fx with the patches applied; a call that still carries patches is not yet compiling)."""
    import torch._inductor.compile_fx as cfx

    log, original = [], cfx.compile_fx

    def probe(gm, example_inputs, *args, **kwargs):
        from torch._inductor import config

        if not kwargs.get("config_patches"):
            log.append(config.max_fusion_size)
        return original(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", probe)
    return log


def _compiled(url: str, *, dynamic: bool | None):
    from tuner.lookup import Lookup
    from tuner.lookup.backend import TunerBackend
    from tuner.settings import Settings
    from tuner.workload import load_model_file

    torch._dynamo.reset()
    model = load_model_file(BATCHED).model
    return model, torch.compile(model, backend=TunerBackend(lookup=Lookup(Settings(db_url=url))), dynamic=dynamic)


def test_each_bucket_shape_gets_its_config_with_one_compile_per_shape(bucket_db: str, seen: list[int]) -> None:
    from torch._dynamo.utils import counters

    model, compiled = _compiled(bucket_db, dynamic=False)
    counters.clear()
    with torch.no_grad():
        for _ in range(2):                                # the second pass reuses every compiled shape
            for batch in SIZES:
                x = torch.randn(batch, 32)
                torch.testing.assert_close(compiled(x), model(x))
    assert seen == [FUSION[b] for b in SIZES]
    assert counters["stats"]["unique_graphs"] == 3


def test_an_unseen_shape_takes_the_nearest_bucket(bucket_db: str, seen: list[int]) -> None:
    from torch._dynamo.utils import counters

    model, compiled = _compiled(bucket_db, dynamic=False)
    counters.clear()
    with torch.no_grad():
        for batch in (8, 5, 2, 16, 5):                    # 5: nearest 8 (1.6x); 2: nearest 1 (2x, 8 is 4x);
            x = torch.randn(batch, 32)                    # 16: halfway between 8 and 32, so the larger
            torch.testing.assert_close(compiled(x), model(x))
    assert seen == [FUSION[8], FUSION[8], FUSION[1], FUSION[32]]
    assert counters["stats"]["unique_graphs"] == 4       # one compile per shape, batch 5 reused


def test_a_dynamic_graph_dispatches_each_size_to_its_nearest_buckets_copy(bucket_db: str, seen: list[int]) -> None:
    """Without dynamic=False, Dynamo's second shape gives one graph with a symbolic batch: the
    backend compiles a copy per bucket config and each call runs its nearest bucket's copy."""
    from torch._dynamo.utils import counters

    from tuner.lookup import Lookup
    from tuner.lookup.backend import TunerBackend
    from tuner.lookup.dispatch import Dispatcher
    from tuner.settings import Settings
    from tuner.workload import load_model_file

    returned = []

    class Keeping(TunerBackend):                          # keeps what the real backend returns
        def __call__(self, gm, example_inputs, **kwargs):
            returned.append(super().__call__(gm, example_inputs, **kwargs))
            return returned[-1]

    torch._dynamo.reset()
    model = load_model_file(BATCHED).model
    compiled = torch.compile(model, backend=Keeping(lookup=Lookup(Settings(db_url=bucket_db))))
    counters.clear()
    with torch.no_grad():
        for batch in (1, 8, 32, 5, 16, 2, 64):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(compiled(x), model(x))
    assert counters["stats"]["unique_graphs"] == 2       # batch 1 static, then one symbolic graph for all
    assert seen == [FUSION[1], FUSION[1], FUSION[8], FUSION[32]]   # the symbolic graph: one copy per bucket
    dispatcher = returned[1]
    assert isinstance(dispatcher, Dispatcher)
    # 8, 5 -> batch=8; 32, 16 (a tie: the larger), 64 -> batch=32; 2 -> batch=1
    assert dispatcher.calls == [1, 2, 3]


def test_dispatch_binds_a_symbolic_graph_to_its_static_buckets() -> None:
    from tuner.lookup.dispatch import Dispatcher, SymbolSite, bind, symbol_sites

    static = ("tuner-fingerprint v1; grad=0 autocast[cpu]=off\n"
              "%0 = placeholder () :: T([64,32] stride=32,1 float32 cpu rg=0) param\n"
              "%1 = placeholder () :: T([8,5,32] stride=160,32,1 float32 cpu rg=0)\n"
              "%2 = call_method reshape(%1, 40, 32) :: T([40,32] stride=32,1 float32 cpu rg=0)\n"
              "%3 = call_function torch._C._nn.linear(%2, %0) :: T([40,64] stride=64,1 float32 cpu rg=0)\n"
              "%4 = output ((%3,))")
    dynamic = ("tuner-fingerprint v1; grad=0 autocast[cpu]=off\n"
               "%0 = placeholder () :: T([64,32] stride=32,1 float32 cpu rg=0) param\n"
               "%1 = placeholder () :: s0\n"
               "%2 = placeholder () :: T([s0,5,32] stride=160,32,1 float32 cpu rg=0)\n"
               "%3 = call_function _operator.mul(%1, 5) :: 5*s0\n"
               "%4 = call_method reshape(%2, %3, 32) :: T([5*s0,32] stride=32,1 float32 cpu rg=0)\n"
               "%5 = call_function torch._C._nn.linear(%4, %0) :: T([5*s0,64] stride=64,1 float32 cpu rg=0)\n"
               "%6 = output ((%5,))")
    assert symbol_sites(dynamic) == (SymbolSite("s0", 2, 0),) and symbol_sites(static) == ()
    assert bind(dynamic, static) == {"s0": 8} and bind(static, dynamic) is None
    assert bind(dynamic, static.replace("[8,5,32]", "[8,6,32]")) is None                   # a fixed size differs
    assert bind(dynamic, static.replace("[64,32] stride=32,1", "[48,32] stride=32,1")) is None   # other weights
    assert bind(dynamic, static.replace("linear", "bilinear")) is None                    # another graph
    ran = []
    dispatch = Dispatcher(symbol_sites(dynamic), [({"s0": 1}, 0), ({"s0": 8}, 1), ({"s0": 32}, 1)],
                          [lambda *a: ran.append("small"), lambda *a: ran.append("large")])
    for batch in (1, 2, 5, 100):
        dispatch(None, batch, torch.empty(batch, 5, 32))
    assert ran == ["small", "small", "large", "large"] and dispatch.calls == [2, 1, 1]


def test_explain_names_the_nearest_bucket_and_other_graphs_stay_misses(bucket_db: str, tmp_path: Path) -> None:
    done = run_main("explain", str(BATCHED), "--shapes", "batch=32,5", "--db", bucket_db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("batched_mlp[batch=32]: 1 graph(s)") and "graph 0: exact hit" in done.stdout
    assert "\nbatched_mlp[batch=5]: 1 graph(s)" in done.stdout
    assert "graph 0: nearest-bucket hit (this graph at another size, this platform)" in done.stdout, done.stdout
    assert "nearest tuned bucket batched_mlp[batch=8]" in done.stdout and "up to 1.60x apart" in done.stdout
    assert "applies: max_fusion_size=16" in done.stdout
    wider = tmp_path / "wider.py"                          # another graph (other weights), not a bucket's
    wider.write_text(BATCHED.read_text().replace("nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)",
                                                 "nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 32)"))
    done = run_main("explain", str(wider), "--db", bucket_db)
    assert done.returncode == 0 and "graph 0: miss" in done.stdout, done.stdout


def test_best_and_trials_show_each_bucket(bucket_db: str) -> None:
    done = run_main("best", str(BATCHED), "--shapes", "batch=1,8,32", "--db", bucket_db)
    assert done.returncode == 0, done.stderr
    blocks = done.stdout.split("batch=")[1:]
    assert [b.splitlines()[0] for b in blocks] == ["1:", "8:", "32:"]
    assert [b.splitlines()[1] for b in blocks] == [f"config: max_fusion_size={FUSION[s]}" for s in SIZES]
    none = run_main("best", str(BATCHED), "--shapes", "batch=5", "--db", bucket_db)   # best is exact only
    assert none.returncode == 1 and "no stored config for" in none.stderr


def test_size_distance_blanks_sizes_only_and_ties_go_to_the_larger_bucket() -> None:
    from tuner.workload import nearest, size_distance

    code = "%2 = placeholder () :: T([8,32] stride=32,1 float32 cpu) view(%2, [8, 4]) mul 0.125"
    at = {b: code.replace("[8,", f"[{b},").replace("[8, 4]", f"[{b}, 4]") for b in (1, 5, 8, 16, 32)}
    assert size_distance(at[8], at[8]) == 0.0
    assert size_distance(at[5], at[8]) == pytest.approx(abs(math.log(5 / 8)))
    assert size_distance(code, code.replace("float32", "float16")) is None     # a dtype is not a size
    assert size_distance(code, code.replace("0.125", "0.25")) is None          # nor a constant
    assert size_distance(code, code.replace("[8,32]", "[s0,32]")) is None      # nor a symbolic size
    weights = "%0 = placeholder () :: T([64,32] stride=32,1 float32 cpu rg=0) param\n"
    assert size_distance(weights + code, weights.replace("64", "48") + code) is None   # nor a weight's size
    assert size_distance(weights + at[5], weights + at[8]) == size_distance(at[5], at[8])
    buckets = [at[1], at[8], at[32]]
    assert [nearest(at[b], buckets) for b in (5, 16, 1)] == [1, 2, 0]
    assert nearest(code.replace("float32", "float16"), buckets) is None


# ---------------------------------------------------------------- a real search with buckets

@pytest.mark.slow
def test_a_search_with_two_buckets_stores_a_config_per_bucket(tmp_path: Path) -> None:
    from tuner.platform import current_platform
    from tuner.storage import Store

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    done = run_main("search", str(BATCHED), "--shapes", "batch=2:3,16:1", "--trials", "2", "--executor", "local",
                    "--repeat", "3", "--rounds", "12", "--no-warm-start", "--db", url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tuning batched_mlp[batch=2]" in done.stderr and "tuning batched_mlp[batch=16]" in done.stderr
    table = done.stdout[done.stdout.index("shape buckets on platform"):].splitlines()
    rows = {line.split()[0]: line.split() for line in table[3:]}
    assert set(rows) == {"batch=2", "batch=16", "weighted"}
    assert (rows["batch=2"][1], rows["batch=16"][1]) == ("0.75", "0.25")
    default = 0.75 * float(rows["batch=2"][2]) + 0.25 * float(rows["batch=16"][2])
    tuned = 0.75 * float(rows["batch=2"][3]) + 0.25 * float(rows["batch=16"][3])
    assert float(rows["weighted"][2]) == pytest.approx(default, abs=2e-3)
    assert float(rows["weighted"][3]) == pytest.approx(tuned, abs=2e-3)
    platform = current_platform("cpu", threads=torch.get_num_threads())
    with Store.open(url, readonly=True) as store:
        for batch in (2, 16):
            graph = bucket_workload(batch).graphs[0]
            assert store.best_config(graph.key, platform.key) is not None, batch
