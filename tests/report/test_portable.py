"""`tuner best MODEL --emit python|json`: a stored verdict as code that applies it with torch alone.

The emitted snippet runs in a fresh process that never imports tuner: the probe wraps Inductor's
`compile_fx`, which Inductor re-enters with the config patches active, and records the live
config there (as tests/lookup/test_lookup.py does), so what is checked is the config Inductor
compiled under, not a timing. Pure cases (modes, mixed graphs, hostile rows) run on hand-made rows.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import MODELS, cli_env, run_main
from helpers.stored import TINY, best_for, store_configs, tiny_workload
from tuner.errors import TunerError, UsageError
from tuner.platform import current_platform
from tuner.report import portable_verdict, render_portable

PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import torch._inductor.compile_fx as cfx
    sys.path.insert(0, {models!r})
    import tiny_mlp

    seen, original = [], cfx.compile_fx

    def probe(gm, example_inputs, *args, **kwargs):
        from torch._inductor import config
        if kwargs.get("config_patches"):     # the outer call: Inductor re-enters with them applied
            return original(gm, example_inputs, *args, **kwargs)
        seen.append(dict(max_fusion_size=config.max_fusion_size, freezing=config.freezing,
                         epilogue_fusion=config.epilogue_fusion,
                         get_attr=sum(n.op == "get_attr" for n in gm.graph.nodes)))
        return original(gm, example_inputs, *args, **kwargs)

    cfx.compile_fx = probe
    exec(compile(open({snippet!r}).read(), "snippet", "exec"))
    torch.manual_seed(5)
    model, (x,) = tiny_mlp.get_model(), tiny_mlp.get_inputs()
    compiled = tuned_compile(model)
    with first_call():
        out = compiled(x)
    with torch.no_grad():
        again, ref = compiled(x), model(x)
    print("REPORT " + json.dumps(dict(seen=seen, err=float(max((out - ref).abs().max(), (again - ref).abs().max())),
                                      tuner_imported="tuner" in sys.modules)))
''')


def emitted(tmp_path: Path, params: dict, form: str = "python") -> str:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu"), params)
    done = run_main("best", str(TINY), "--emit", form, "--db", url)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_snippet(tmp_path: Path, snippet: str) -> dict:
    path = tmp_path / "snippet.py"
    path.write_text(snippet)
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.format(models=str(MODELS), snippet=str(path)))
    env = {k: v for k, v in cli_env().items() if k != "TUNER_DB"}
    out = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")).removeprefix("REPORT "))


@pytest.mark.slow
def test_an_emitted_freezing_verdict_runs_with_torch_alone_and_freezes(tmp_path: Path) -> None:
    snippet = emitted(tmp_path, {"max_fusion_size": 8, "freezing": True})
    assert "PATCHES = {'freezing': True, 'max_fusion_size': 8}" in snippet
    assert "torch.compile(model, backend=tuned_backend)" in snippet
    assert "torch._inductor.config.patch({'freezing': True})" in snippet and "torch.no_grad()" in snippet
    assert "Measured: inference calls under torch.no_grad()" in snippet and "import tuner" not in snippet
    report = run_snippet(tmp_path, snippet)
    assert not report["tuner_imported"] and report["err"] < 1e-4
    assert report["seen"] and all(s["max_fusion_size"] == 8 and s["freezing"] for s in report["seen"])
    assert all(s["get_attr"] > 0 for s in report["seen"])       # the weights are constants: frozen


@pytest.mark.slow
def test_an_emitted_knob_verdict_compiles_under_the_stored_config(tmp_path: Path) -> None:
    snippet = emitted(tmp_path, {"max_fusion_size": 4, "epilogue_fusion": False})
    assert "PATCHES = {'epilogue_fusion': False, 'max_fusion_size': 4}" in snippet and "freezing" not in snippet
    report = run_snippet(tmp_path, snippet)
    assert report["err"] < 1e-4 and report["seen"]
    assert all(s["max_fusion_size"] == 4 and not s["epilogue_fusion"] and not s["freezing"] and s["get_attr"] == 0
               for s in report["seen"])


def test_json_carries_the_same_verdict_as_data(tmp_path: Path) -> None:
    data = json.loads(emitted(tmp_path, {"max_fusion_size": 8, "freezing": True}, form="json"))
    assert data["format"] == 2 and data["verdict"] == "config" and data["workload"] == tiny_workload().key
    assert data["torch_compile"] == {"compiled": True, "config_patches": {"max_fusion_size": 8, "freezing": True}}
    assert data["runtime"] == {"knobs": {}, "env": {}, "mallopt": []}
    assert data["around_first_call"] == {"torch._inductor.config": {"freezing": True},
                                         "torch._functorch.config": {}, "no_grad": True}
    assert data["python"].startswith("# tuner's stored verdict") and data["not_expressed"] == []


BESIDE_A_DEFAULT = textwrap.dedent('''
    import json, sys
    import torch
    sys.path.insert(0, {models!r})
    import tiny_mlp
    exec(compile(open({snippet!r}).read(), "snippet", "exec"))
    torch.manual_seed(5)
    x = tiny_mlp.get_inputs()[0]
    with torch.no_grad():
        torch.compile(tiny_mlp.get_model())(x)       # a default compile of a copy first, as one checks a speedup
        model = tiny_mlp.get_model()
        compiled = tuned_compile(model)
        with first_call():
            before = compiled(x)
        model[0].weight.mul_(2.0)                    # frozen weights are constants: the output does not change
        after = compiled(x)
    print("REPORT " + json.dumps(dict(frozen=bool(torch.equal(before, after)))))
''')


@pytest.mark.slow
def test_the_emitted_code_freezes_in_a_script_that_compiled_the_default_first(tmp_path: Path) -> None:
    """A config patched around the first call is not part of what Dynamo caches a compiled frame under,
    so for freezing alone (examples/resnet.py's verdict) a plain torch.compile(model) took the default
    compile's cached graph here (not frozen); the snippet's backend of its own is compiled for its model."""
    snippet = emitted(tmp_path, {"freezing": True})
    path = tmp_path / "snippet.py"
    path.write_text(snippet)
    program = tmp_path / "program.py"
    program.write_text(BESIDE_A_DEFAULT.format(models=str(MODELS), snippet=str(path)))
    env = {k: v for k, v in cli_env().items() if k != "TUNER_DB"}
    out = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["frozen"]


def test_nothing_stored_says_what_to_run(tmp_path: Path) -> None:
    from tuner.storage import upgrade

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    done = run_main("best", str(TINY), "--emit", "python", "--db", url)
    assert done.returncode == 1 and done.stdout == ""
    assert "no stored config" in done.stderr and "run: tuner search" in done.stderr


# ------------------------------------------------------------------ hand-made rows, no database


@pytest.fixture(scope="module")
def target():
    return tiny_workload(), current_platform("cpu")


def portable(target, params: dict, **fields):
    workload, platform = target
    bests = [best_for(g.key, platform.key, params, workload.key, **fields) for g in workload.graphs]
    return portable_verdict(bests, model="m.py", workload=workload, platform=platform)


def test_a_mode_is_expanded_into_the_backends_patches(target) -> None:
    alone = portable(target, {"mode": "max-autotune-no-cudagraphs"})
    assert dict(alone.patches)["max_autotune"] is True
    both = portable(target, {"mode": "max-autotune-no-cudagraphs", "max_fusion_size": 8})
    assert dict(both.patches)["max_autotune"] is True and dict(both.patches)["max_fusion_size"] == 8
    compile(both.python(), "snippet", "exec")      # valid Python


def test_eager_and_defaults_verdicts(target) -> None:
    eager = portable(target, {}, eager=True)
    assert eager.verdict == "eager" and "return model" in eager.python() and "torch.compile" not in eager.python()
    assert "return torch.compile(model)" in portable(target, {}).python()


def test_graphs_with_different_verdicts_say_what_plain_torch_compile_cannot_express(target) -> None:
    workload, platform = target
    graph = workload.graphs[0]
    other = type(graph)(key="b" * 64, index=1, num_nodes=1, input_meta="[]", code="graph")
    two = type(workload)(key=workload.key, name=workload.name, graphs=(graph, other))
    bests = [best_for(graph.key, platform.key, {"max_fusion_size": 8}, workload.key),
             best_for(other.key, platform.key, {}, workload.key, eager=True)]
    result = portable_verdict(bests, model="m.py", workload=two, platform=platform)
    assert result.verdict == "mixed" and dict(result.patches) == {"max_fusion_size": 8}   # the largest graph's
    assert "applies the largest graph's" in result.not_expressed[0] and 'backend="tuner"' in result.not_expressed[0]
    two_configs = [best_for(graph.key, platform.key, {"max_fusion_size": 8}, workload.key),
                   best_for(other.key, platform.key, {"max_fusion_size": 16}, workload.key)]
    differing = portable_verdict(two_configs, model="m.py", workload=two, platform=platform)
    assert differing.verdict == "mixed" and dict(differing.patches) == {"max_fusion_size": 8}, differing
    assert differing.not_expressed and "different verdicts" in differing.not_expressed[0]


def test_precision_and_kernels_are_named_as_not_expressed(target) -> None:
    workload, platform = target
    bests = [best_for(g.key, platform.key, {"max_fusion_size": 8}, workload.key) for g in workload.graphs]
    result = portable_verdict(bests, model="m.py", workload=workload, platform=platform, kernels=3)
    assert any("3 kernel tile config(s)" in n for n in result.not_expressed)


@pytest.mark.parametrize("params", [{"max_fusion_size": "8}); import os; os.system('id'); ({"},
                                    {"__import__('os').system('id')": True},
                                    {"max_fusion_size": 10**30}])
def test_a_hostile_row_never_becomes_code(target, params: dict) -> None:
    with pytest.raises((UsageError, TunerError)) as refused:
        portable(target, params)
    assert "\n" not in str(refused.value)


def test_runtime_knobs_are_the_start_environment_and_what_a_running_process_sets(target) -> None:
    from tuner.runtime import allocators

    retain = portable(target, {"max_fusion_size": 8}, runtime={"runtime.allocator": "glibc-retain"})
    code = retain.python()
    assert "def set_runtime():" in code and "libc.mallopt(-3, 1073741824)" in code and "    set_runtime()" in code
    assert "RUNTIME_ENV = {'MALLOC_MMAP_THRESHOLD_': '1073741824', 'MALLOC_TRIM_THRESHOLD_': '1073741824'}" in code
    assert "with runtime.allocator=glibc-retain, confirmed" in retain.summary
    passive = portable(target, {}, runtime={"runtime.omp_wait_policy": "passive"})
    assert "set_runtime" not in passive.python() and "OMP_WAIT_POLICY=PASSIVE python PROGRAM.py" in passive.python()
    assert passive.as_json()["runtime"] == {"knobs": {"runtime.omp_wait_policy": "passive"},
                                            "env": {"OMP_WAIT_POLICY": "PASSIVE"}, "mallopt": []}
    if allocators.available("jemalloc"):
        jemalloc = portable(target, {}, eager=True, runtime={"runtime.allocator": "jemalloc"})
        assert f"LD_PRELOAD={allocators.library('jemalloc')}" in jemalloc.python()
        assert "return model" in jemalloc.python()


def test_render_json_of_several_buckets_is_a_list(target) -> None:
    one = portable(target, {"max_fusion_size": 8})
    assert isinstance(json.loads(render_portable([one, one], "json")), list)
    assert render_portable([one], "python").count("def tuned_compile") == 1


# ------------------------------------------------------------------ text that is not a row, in comments

# Line ends Python's tokenizer knows (\n, \r, \r\n), a form feed, a line separator, a lone surrogate
# (a path's undecodable byte): none may end a comment, and the text must stay printable.
HOSTILE = ["m.py\nimport os  #", "m.py\rimport os  #", "m.py\r\nimport os; os.system('id')  #",
           "m.py\x0c\nimport os", "m.py\u2028import os", "m.py\udcff\x85import os"]
SNIPPET_STATEMENTS = ["Import contextlib", "Import torch", "Assign PATCHES", "FunctionDef tuned_backend",
                      "FunctionDef tuned_compile", "FunctionDef first_call"]


def statements(snippet: str) -> list[str]:
    """The snippet's top-level statements, as `Kind name`."""
    tree = ast.parse(snippet)
    return [f"{type(node).__name__} {_name(node)}" for node in tree.body]


def _name(node: ast.stmt) -> str:
    if isinstance(node, ast.Assign):
        return ", ".join(ast.unparse(t) for t in node.targets)
    return getattr(node, "name", None) or ast.unparse(node).split()[-1]


@pytest.mark.parametrize("text", HOSTILE, ids=ascii)
def test_no_interpolated_text_becomes_code(target, text: str) -> None:
    """Every text the snippet interpolates (the model path, the summary, the platform, the
    conditions, what is not expressed) is a comment of one line whatever it holds: the parsed
    snippet is the emitter's, statement for statement, as with plain text."""
    plain = portable(target, {"max_fusion_size": 8, "freezing": True})
    expected = ast.dump(ast.parse(plain.python()))
    assert statements(plain.python()) == SNIPPET_STATEMENTS
    for field, value in (("model", text), ("summary", text), ("platform", text), ("conditions", (text, text)),
                         ("not_expressed", (text,))):
        snippet = dataclasses.replace(plain, **{field: value}).python()
        tame = dataclasses.replace(plain, **{field: "x" if isinstance(value, str) else ("x",) * len(value)}).python()
        snippet.encode("utf-8")                 # printable as it is, whatever the path held
        assert statements(snippet) == SNIPPET_STATEMENTS, snippet
        assert ast.dump(ast.parse(snippet)) == expected, snippet
        assert snippet.count("\n") == tame.count("\n"), snippet      # one comment line per text
        assert "import os" in snippet           # still said, escaped, in its comment


def test_a_model_path_with_a_newline_stays_in_its_comment(tmp_path: Path) -> None:
    """`tuner best models/* --emit python > tuned.py`: a model file whose name holds a newline and
    code yields the snippet it always does (the path escaped in the first comment)."""
    model = tmp_path / "tiny\nimport os  #.py"
    model.write_text(TINY.read_text())
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu"), {"max_fusion_size": 8})
    done = run_main("best", str(model), "--emit", "python", "--db", url)
    assert done.returncode == 0, done.stderr
    assert statements(done.stdout) == SNIPPET_STATEMENTS, done.stdout
    assert done.stdout.splitlines()[0] == f"# tuner's stored verdict for {tmp_path}/tiny\\nimport os  #.py, applied " \
                                          "with torch alone (no tuner, no database)."
