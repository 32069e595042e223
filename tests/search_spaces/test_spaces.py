"""Search spaces: tables against the installed torch, space files, Optuna define-by-run, candidates."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.errors import SpaceError
from tuner.search_spaces import (Knob, SearchSpace, cpu, cuda, installed_default, installed_has, known_knobs,
                                 load_space, mode_options, same_value, validate_params)
from tuner.search_spaces.knobs import resolve
from tuner.trial import Candidate

optuna.logging.set_verbosity(optuna.logging.WARNING)

MAX = "max-autotune-no-cudagraphs"


def write_space(tmp_path: Path, data: Any, name: str = "space.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def effective(space: SearchSpace, params: dict[str, Any], name: str) -> Any:
    """The value Inductor would see for `name` (written independently of SearchSpace)."""
    knob = space.knob(name)
    if name in params and not same_value(params[name], knob.default):
        return params[name]
    if name == "mode":
        return knob.default
    return mode_options(params.get("mode", "default")).get(name, knob.default)


def assert_consistent(space: SearchSpace, params: dict[str, Any]) -> None:
    """Every active knob is present, every present knob is active."""
    for knob in space.knobs:
        active = knob.parent is None or (
            knob.parent[0] in params and same_value(effective(space, params, knob.parent[0]), knob.parent[1]))
        assert (knob.name in params) == active, (knob.name, params)
        if active:
            assert knob.value_problem(params[knob.name]) is None


# -- the tables against the installed torch ----------------------------------

@pytest.mark.parametrize("table", [cpu.KNOBS, cuda.KNOBS], ids=["cpu", "cuda"])
def test_every_table_knob_exists_in_this_torch(table):
    for knob in table:
        assert installed_has(knob.name), knob.name
        if knob.name != "mode":
            assert same_value(installed_default(knob.name), knob.default), knob.name


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("training", [False, True])
def test_space_keeps_every_knob_or_says_why(device, training):
    space = load_space(device, training=training, include_unsafe=True, threads=4)
    table = cpu.KNOBS if device == "cpu" else cuda.KNOBS
    kept = {k.name for k in space.knobs}
    wrong_scope = "inference" if training else "training"
    for knob in table:
        if knob.scope == wrong_scope:
            assert knob.name not in kept
        else:
            assert knob.name in kept or any(knob.name in n for n in space.notices), knob.name
    assert not space.notices, space.notices   # this torch has every knob of the tables


def test_scope_and_unsafe_filters():
    inference, training = load_space("cpu"), load_space("cpu", training=True)
    names = {k.name for k in inference.knobs}
    train_names = {k.name for k in training.knobs}
    assert "freezing" in names and "cpp.enable_concat_linear" in names
    assert "cpp.weight_prepack" not in names          # decided once per process: see search_spaces/cpu.py
    assert "functorch.activation_memory_budget" not in names
    assert "freezing" not in train_names and "cpp.enable_concat_linear" not in train_names
    assert "functorch.activation_memory_budget" in train_names
    assert not any(k.unsafe for k in inference.knobs)
    unsafe = load_space("cpu", include_unsafe=True)
    assert {"cpp.simdlen", "cpp.enable_unsafe_math_opt_flag"} <= {k.name for k in unsafe.knobs}
    assert len({inference.hash, training.hash, unsafe.hash}) == 3


def test_missing_or_mistyped_knob_is_a_notice_not_a_crash():
    knob, notices = resolve(Knob("no_such_knob", "bool", False, "fusion"))
    assert knob is None and "no_such_knob" in notices[0] and "skipped" in notices[0]
    knob, notices = resolve(Knob("max_fusion_size", "bool", False, "fusion"))
    assert knob is None and "does not fit a bool knob" in notices[0]
    knob, notices = resolve(Knob("mode", "choice", "default", "mode", choices=("default", "warp-speed")))
    assert knob is not None and knob.choices == ("default",) and "warp-speed" in notices[0]
    # a default that moved in this torch is adopted, and the range widened to hold it
    knob, notices = resolve(Knob("max_fusion_size", "int", 8, "fusion", low=4, high=16))
    assert knob is not None and knob.default == 64 and knob.high == 64 and notices


def test_device_names():
    assert load_space("cuda:1").device == "cuda"
    with pytest.raises(SpaceError, match="no built-in search space for device 'xpu'"):
        load_space("xpu")


def test_thread_factor_choices_follow_the_thread_count():
    for threads in (2, 6, 56):
        choices = cpu.thread_factor_choices(threads)
        assert 0 < len(choices) <= cpu.MAX_THREAD_FACTORS
        for c in choices:
            m, n, k = map(int, c.split(","))
            assert m * n * k == threads
    assert load_space("cpu", threads=8).knob("cpp.gemm_thread_factors").choices[1:] == cpu.thread_factor_choices(8)
    one = load_space("cpu", threads=1)
    assert "cpp.gemm_thread_factors" not in {k.name for k in one.knobs}
    assert any("cpp.gemm_thread_factors" in n for n in one.notices)


# -- Optuna -------------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("training", [False, True])
def test_suggest_never_returns_an_inactive_child(device, training):
    space = load_space(device, training=training, include_unsafe=True, threads=4)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=10))
    seen_children = set()
    for i in range(40):
        trial = study.ask()
        params = space.suggest(trial)
        assert params.keys() == trial.params.keys()
        assert all(params[k] == pytest.approx(v) for k, v in trial.params.items())
        assert_consistent(space, params)
        seen_children |= {n for n in params if space.knob(n).parent is not None}
        assert all(len(repr(v)) < 8 for v in params.values() if isinstance(v, float))
        study.tell(trial, float(i % 7))
    assert seen_children   # the sampler did reach conditional knobs


def test_seeds_defaults_first_then_modes_then_freezing():
    space = load_space("cpu", threads=2)
    seeds = space.seeds()
    assert seeds[0] == space.default_params()
    assert space.candidate(seeds[0]) == Candidate() and space.candidate(seeds[0]).is_default
    assert [space.candidate(s).as_dict() for s in seeds[1:]] == [{"mode": MAX}, {"freezing": True}]
    study = optuna.create_study()
    for seed in seeds:
        study.enqueue_trial(seed)
    for seed in seeds:
        trial = study.ask()
        assert space.suggest(trial) == seed
        assert_consistent(space, seed)
        study.tell(trial, 1.0)
    assert "freezing" not in {k for s in load_space("cpu", training=True).seeds() for k in s}
    cuda_modes = [space_c.candidate(s).as_dict().get("mode") for space_c in [load_space("cuda")]
                  for s in space_c.seeds()]
    assert cuda_modes == [None, "reduce-overhead", "max-autotune", MAX, None]


def test_identical_compiles_share_a_candidate_key():
    space = load_space("cpu", threads=2)
    via_mode = space.complete({"mode": MAX})
    via_both = space.complete({"mode": MAX, "max_autotune": True})
    assert via_mode != via_both
    assert space.candidate(via_mode).key == space.candidate(via_both).key
    assert space.candidate(via_both).as_dict() == {"mode": MAX}
    # an inactive child is ignored; a knob at its default is dropped
    stray = {**space.default_params(), "cpp.gemm_max_k_slices": 4, "max_fusion_size": 64}
    assert space.candidate(stray) == Candidate()
    # the child is kept once its parent is on, through the knob or through the mode
    on = space.candidate(space.complete({"max_autotune": True, "cpp.gemm_max_k_slices": 4}))
    assert on.as_dict() == {"max_autotune": True, "cpp.gemm_max_k_slices": 4}
    by_mode = space.candidate(space.complete({"mode": MAX, "cpp.gemm_max_k_slices": 4}))
    assert by_mode.as_dict() == {"mode": MAX, "cpp.gemm_max_k_slices": 4}


def test_candidate_rejects_params_outside_the_space():
    space = load_space("cpu", threads=2)
    with pytest.raises(SpaceError, match="not in search space"):
        space.candidate({"triton.max_tiles": 2})
    with pytest.raises(SpaceError, match="max_fusion_size"):
        space.candidate({"max_fusion_size": 10_000})


def test_replayed_trials_are_consistent():
    space = load_space("cpu", threads=2)
    stored = [Candidate(), Candidate.from_dict({"mode": MAX, "cpp.gemm_cache_blocking": "2,2,64"}),
              Candidate.from_dict({"freezing": True, "cpp.enable_concat_linear": True, "max_fusion_size": 8})]
    study = optuna.create_study()
    for i, cand in enumerate(stored):
        params = space.replay_params(cand.as_dict())
        assert_consistent(space, params)
        assert space.candidate(params) == cand
        study.add_trial(optuna.trial.create_trial(params=params, distributions=space.distributions(params),
                                                  value=float(i)))
    assert len(study.trials) == 3
    assert set(space.distributions()) == {k.name for k in space.knobs}
    with pytest.raises(SpaceError, match="inactive"):
        space.replay_params({"cpp.gemm_max_k_slices": 4})   # parent max_autotune is off


def test_hash_is_stable_across_processes():
    code = "from tuner.search_spaces import load_space; print(load_space('cpu', threads=2).hash)"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert other.stdout.strip() == load_space("cpu", threads=2).hash
    assert load_space("cpu", threads=2).hash != load_space("cpu", threads=4).hash


# -- user space files ---------------------------------------------------------

def test_space_file_extends_narrows_and_excludes(tmp_path):
    path = write_space(tmp_path, {
        "name": "mine", "extends": "cpu", "exclude": ["cpp_wrapper"],
        "knobs": [{"name": "max_fusion_size", "kind": "choice", "choices": [16, 64, 256]},
                  {"name": "cpp.min_chunk_size", "low": 256, "high": 2048},
                  {"name": "cpp.simdlen", "kind": "choice", "choices": [None, 256]}]})
    space = load_space("cpu", path=path, threads=2)
    names = [k.name for k in space.knobs]
    assert space.name == "mine" and "cpp_wrapper" not in names and "mode" in names
    assert space.knob("max_fusion_size").choices == (16, 64, 256)
    assert (space.knob("cpp.min_chunk_size").low, space.knob("cpp.min_chunk_size").high) == (256, 2048)
    assert "cpp.simdlen" not in names and any("include_unsafe" in n for n in space.notices)
    assert "cpp.simdlen" in {k.name for k in load_space("cpu", path=path, include_unsafe=True, threads=2).knobs}


def test_excluding_a_parent_leaves_its_children_out(tmp_path):
    path = write_space(tmp_path, {"name": "no-autotune", "extends": "cpu", "exclude": ["max_autotune"]})
    space = load_space("cpu", path=path, threads=2)
    names = {k.name for k in space.knobs}
    assert "max_autotune" not in names and not any(n.startswith("cpp.gemm_") for n in names)
    assert any("cpp.gemm_max_k_slices left out" in n for n in space.notices)
    assert [space.candidate(s).as_dict() for s in space.seeds()] == [{}, {"mode": MAX}, {"freezing": True}]


def test_space_file_on_its_own(tmp_path):
    path = write_space(tmp_path, {"name": "tiny", "knobs": [
        {"name": "max_autotune", "kind": "bool"},
        {"name": "cpp.gemm_max_k_slices", "choices": [1, 0], "parent": ["max_autotune", True]}]})
    space = load_space("cpu", path=path)
    assert [k.name for k in space.knobs] == ["max_autotune", "cpp.gemm_max_k_slices"]
    assert space.seeds() == [{"max_autotune": False}]


@pytest.mark.parametrize("data, needle", [
    ({"name": "x", "knobs": [{"name": "max_fusion_size", "kind": "integer"}]}, "has kind 'integer'"),
    ({"name": "x", "knobs": [{"name": "max_fuzion_size", "kind": "int"}]}, "not a knob tuner knows"),
    ({"name": "x", "knobs": [{"name": "cpp.cxx", "kind": "choice", "choices": ["g++"]}]}, "not a knob tuner knows"),
    ({"name": "x", "knobs": [{"name": "max_fusion_size", "low": 128, "high": 256}]}, "outside [128, 256]"),
    ({"name": "x", "knobs": [{"name": "max_fusion_size", "high": 100000}]}, "allowed domain"),
    ({"name": "x", "knobs": [{"name": "max_fusion_size", "default": 32}]}, "remove \"default\""),
    ({"name": "x", "knobs": [{"name": "max_fusion_size", "kind": "bool"}]}, "its values are int"),
    ({"name": "x", "knobs": [{"name": "max_fusion_size", "colour": "red"}]}, "unknown key(s) 'colour'"),
    ({"name": "x", "knobs": [{"name": "cpp.gemm_max_k_slices", "parent": ["max_autotune", True]}]},
     "not in the space"),
    ({"name": "x", "extends": "cuda", "knobs": []}, "search is for device 'cpu'"),
    ({"name": "x", "extends": "tpu", "knobs": []}, "\"extends\" is 'tpu'"),
    ({"knobs": [{"name": "max_autotune"}]}, "\"name\" is missing"),
    ({"name": "x", "knobs": {"max_autotune": True}}, "\"knobs\" is not a list"),
    ({"name": "x", "knobs": [], "version": 2}, "unknown key(s) 'version'"),
    ("{not json", "not valid JSON"),
    ([1, 2], "top level is not an object"),
])
def test_malformed_space_file_is_one_line_space_error(tmp_path, data, needle):
    path = write_space(tmp_path, data)
    with pytest.raises(SpaceError) as err:
        load_space("cpu", path=path)
    message = str(err.value)
    assert needle in message
    assert message.startswith(f"space file {path}: ") and "\n" not in message and "; " in message


def test_missing_space_file(tmp_path):
    with pytest.raises(SpaceError, match="not found"):
        load_space("cpu", path=tmp_path / "nope.json")


# -- the allow-list -----------------------------------------------------------

def test_validate_params_accepts_known_values():
    validate_params({})
    validate_params({"mode": "max-autotune", "max_fusion_size": 128, "freezing": True, "cpp.simdlen": None,
                     "cpp.gemm_thread_factors": "7,4,2", "functorch.activation_memory_budget": 0.5,
                     "triton.max_tiles": 3, "coordinate_descent_search_radius": 2})
    assert {"mode", "freezing", "max_fusion_size", "triton.max_tiles"} <= set(known_knobs())


@pytest.mark.parametrize("params, needle", [
    ({"no_such_knob": 1}, "unknown knob 'no_such_knob'"),
    ({"cpp.cxx": "evil"}, "unknown knob 'cpp.cxx'"),
    ({"max_fusion_size": True}, "is not an int"),
    ({"max_fusion_size": "64"}, "is not an int"),
    ({"max_fusion_size": 64.5}, "is not an int"),
    ({"epilogue_fusion": 1}, "is not a bool"),
    ({"max_fusion_size": 100000}, "outside"),
    ({"functorch.activation_memory_budget": 2.0}, "outside"),
    ({"mode": "warp-speed"}, "is not one of"),
    ({"cpp.gemm_thread_factors": "0,1,2"}, "is not one of"),
    ({"cpp.gemm_cache_blocking": "4;1;10"}, "is not one of"),
])
def test_validate_params_rejects(params, needle):
    with pytest.raises(SpaceError) as err:
        validate_params(params)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_validate_params_rejects_a_non_mapping():
    with pytest.raises(SpaceError, match="mapping"):
        validate_params([("max_fusion_size", 64)])  # type: ignore[arg-type]
