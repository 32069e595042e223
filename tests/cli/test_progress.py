"""The live progress of a search (tuner/cli/progress.py): the plain lines parsed back, the rich
panel rendered at a fixed width, and the driver's start events, over a recorded table."""
from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from helpers import REPO
from tuner.cli.progress import WIDTH, Progress
from tuner.cli.search import SearchPrinter
from tuner.search import SearchOptions
from tuner.search.driver import Driver, open_study
from tuner.search.recording import read_table
from tuner.storage import Store, TrialRecord, ensure_schema
from tuner.trial import MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor

TABLE = REPO / "bench" / "tables" / "mlp_cpu.json"
KNOBS = r"(?P<knobs>defaults|\d+ knobs?|\S+=\S*(, \S+=\S*)*(, \+\d+ more)?)"
STARTED = re.compile(rf"trial (?P<number>\d+) started: {KNOBS}")
DONE = re.compile(r"(?P<done>\d+)/(?P<total>\d+) trials, (?P<failed>\d+) failed(, (?P<pruned>\d+) pruned)?"
                  r"(, (?P<running>\d+) running)?, (?P<rate>\d+\.\d|>999)/min, ETA \d+m\d\ds \| trial (?P<number>\d+): "
                  r"(?P<result>\d+\.\d{3} ms, (-|\d+\.\d\dx)|[a-z_]+) \(" + KNOBS + r"\)")
BEST = re.compile(r"best so far \(unconfirmed\): (?P<speedup>\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\]) vs default, "
                  r"trial (?P<number>\d+)")
FAILURES = re.compile(r"failures: (?P<counts>[a-z_]+ \d+(, [a-z_]+ \d+)*)")
SECONDS = r"(-|\d+\.\d) s"
PHASES = re.compile(rf"time per trial: start (?P<start>{SECONDS}), load (?P<load>{SECONDS}), "
                    rf"compile (?P<compile>{SECONDS}), measure (?P<measure>{SECONDS})")
LONG = {f"knob_{i:02d}": "ATEN,TRITON,CPP" for i in range(20)}        # a 380-character label


def paired(ms: float, speedup: float) -> Measurement:
    return Measurement(Status.OK, latency_ms=ms, baseline_ms=ms * speedup, speedup=speedup,
                       speedup_low=speedup - 0.03, speedup_high=speedup + 0.03, reps=12)


TRIALS = [({}, paired(1.0, 1.0)),
          ({"max_autotune": True}, paired(0.9, 1.11)),
          ({"cpp_wrapper": True}, Measurement.failed(Status.COMPILE_ERROR, "CppCompileError: boom\nmore")),
          (LONG, paired(0.8, 1.25)),
          ({"freezing": True}, Measurement.failed(Status.CRASHED, "worker died (SIGKILL)")),
          ({"epilogue_fusion": False}, Measurement(Status.PRUNED, latency_ms=1.3, baseline_ms=1.0, speedup=0.77,
                                                   speedup_low=0.7, speedup_high=0.8, reps=6, error="pruned")),
          ({"pattern_matcher": False}, Measurement.failed(Status.COMPILE_ERROR, "InductorError")),
          ({"max_autotune": True, "freezing": True}, Measurement.failed(Status.TIMEOUT, "deadline 60 s")),
          ({"coordinate_descent_tuning": True}, paired(0.95, 1.05)),
          ({"max_fusion_size": 8}, Measurement.failed(Status.WRONG_RESULT, "max abs diff 0.3"))]


def record(number: int) -> TrialRecord:
    params, measurement = TRIALS[number]
    return TrialRecord(number=number, candidate_key=f"k{number}", params=params, measurement=measurement)


def parse(text: str) -> list[tuple[str, re.Match]]:
    """Every line as (kind, match); fails on a line of no documented form, too long, or with ANSI."""
    parsed = []
    for line in text.splitlines():
        assert "\x1b" not in line and len(line) <= WIDTH, line
        kinds = [(kind, m) for kind, rx in (("started", STARTED), ("done", DONE), ("best", BEST),
                                            ("failures", FAILURES), ("phases", PHASES)) if (m := rx.fullmatch(line))]
        assert len(kinds) == 1, line
        parsed.append(kinds[0])
    return parsed


def test_plain_lines_parse_back_to_the_counts_the_failures_by_status_and_the_best() -> None:
    stream = io.StringIO()
    progress = Progress(12, stream=stream)
    for number in range(len(TRIALS)):            # two in flight at once, like --workers 2
        progress.started(number, TRIALS[number][0])
        if number:
            progress.update(record(number - 1))
    progress.update(record(len(TRIALS) - 1))
    progress.close()
    lines = parse(stream.getvalue())
    kinds = Counter(kind for kind, _ in lines)
    assert kinds == {"started": 10, "done": 10, "best": 2, "failures": 5}
    done = [m for kind, m in lines if kind == "done"]
    assert [int(m["number"]) for m in done] == list(range(10)) and [int(m["done"]) for m in done] == list(range(1, 11))
    last = done[-1]
    assert (last["total"], last["failed"], last["pruned"], last["running"]) == ("12", "5", "1", "0")
    assert [m["running"] for m in done[:-1]] == ["1"] * 9
    assert done[2]["result"] == "compile_error" and done[5]["result"] == "pruned"
    assert done[3]["knobs"] == "20 knobs"                  # no whole knob fits beside the counts
    started = [m["knobs"] for kind, m in lines if kind == "started"]
    assert re.fullmatch(r"knob_00=ATEN,TRITON,CPP, (knob_\d\d=ATEN,TRITON,CPP, )+\+\d+ more", started[3])
    assert done[0]["knobs"] == "defaults" and done[1]["result"] == "0.900 ms, 1.11x"
    failures = [m for kind, m in lines if kind == "failures"][-1]
    assert failures["counts"] == "compile_error 2, crashed 1, timeout 1, wrong_result 1"
    best = [m for kind, m in lines if kind == "best"]
    assert [m["number"] for m in best] == ["1", "3"] and best[-1]["speedup"] == "1.25x [1.22, 1.28]"
    assert lines[[m for _, m in lines].index(best[-1]) - 1][1]["number"] == "3"     # right after its trial


def test_the_rate_and_the_mean_phases_follow_the_trials_that_recorded_them() -> None:
    stream = io.StringIO()
    progress = Progress(4, stream=stream)
    progress.update(TrialRecord(number=0, candidate_key="a", params={}, measurement=Measurement(
        Status.OK, latency_ms=1.0, compile_s=3.0, start_s=6.0, load_s=1.0, measure_s=2.0)))
    progress.update(record(1))                     # no phases: no line, no share of the means
    progress.update(TrialRecord(number=2, candidate_key="b", params={"freezing": True}, measurement=Measurement(
        Status.OK, latency_ms=1.0, compile_s=1.0, baseline_compile_s=0.5, start_s=0.0, load_s=0.5, measure_s=1.0,
        compile_cached=False)))
    lines = parse(stream.getvalue())
    assert [kind for kind, _ in lines] == ["done", "phases", "done", "best", "done", "phases"]
    last = lines[-1][1]
    assert (last["start"], last["load"], last["compile"], last["measure"]) == ("3.0 s", "0.8 s", "2.2 s", "1.5 s")
    assert all(m["rate"] == ">999" or float(m["rate"]) > 0 for kind, m in lines if kind == "done")


def test_without_starts_no_running_count_is_shown() -> None:
    """record-space hears no starts: its lines say nothing about running trials."""
    stream = io.StringIO()
    progress = Progress(3, stream=stream)
    for number in range(3):
        progress.update(record(number))
    done = [m for kind, m in parse(stream.getvalue()) if kind == "done"]
    assert len(done) == 3 and all(m["running"] is None for m in done)


def test_the_terminal_panel_holds_the_running_trials_the_best_and_the_folded_knobs() -> None:
    progress = Progress(12, stream=io.StringIO())
    for number in range(5):
        progress.update(record(number))
    progress.started(5, TRIALS[5][0])
    progress.started(6, LONG)
    progress.update(record(3))            # a repeat of trial 3's result: the last finished, with long knobs
    console = Console(file=io.StringIO(), force_terminal=True, width=72)
    console.print(progress)
    text = console.file.getvalue()
    assert "\x1b[" in text                                  # a terminal: colours and all
    plain = Console(file=io.StringIO(), width=72)
    plain.print(progress)
    rows = plain.file.getvalue().splitlines()
    assert all(len(row) <= 72 for row in rows)
    body = " ".join(row.strip("│╭╮╰╯─ ") for row in rows)
    assert "6/12 trials" in body and "best so far (unconfirmed): 1.25x [1.22, 1.28] vs default" in body
    assert "2 failed (compile_error 1, crashed 1), 0 pruned" in body and "running: 2" in body
    assert re.search(r"trial 5 +0m0\ds +epilogue_fusion=False", body)
    assert re.search(r"trial 6 +0m0\ds +knob_00=ATEN,TRITON,CPP, knob_01=", body)
    last = body[body.index("last finished: trial 3, 0.800 ms, 1.25x"):]
    assert all(f"knob_{i:02d}=ATEN" in last.replace(" ", "") for i in range(20))     # folded, none cut


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_it_draws_a_live_panel_instead_of_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "xterm-256color")
    stream = Terminal()
    progress = Progress(3, stream=stream)
    progress.started(0, {})
    progress.update(record(0))
    progress.started(1, TRIALS[1][0])
    progress.update(record(1))
    progress.close()
    text = stream.getvalue()
    assert "\x1b[" in text and "best so far (unconfirmed): 1.11x [1.08, 1.14]" in text
    assert not re.search(r"^trial \d+ started", text, re.MULTILINE) and "2/3 trials" in text


def test_a_dumb_terminal_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    stream = Terminal()
    progress = Progress(3, stream=stream)
    progress.started(0, {})
    progress.update(record(0))
    progress.close()
    assert [kind for kind, _ in parse(stream.getvalue())] == ["started", "done"]


def test_a_search_reports_each_trial_started_before_it_is_done(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The driver over the recorded 48-point MLP table (some rows turned into failures), two trials
    in flight, through the CLI's SearchPrinter: every done line follows its start line."""
    table = read_table(TABLE)
    target = table.target()
    recorded = dict(ReplayExecutor.from_file(TABLE).recorded)
    broken = sorted(recorded)[::7]
    for key, status in zip(broken, [Status.CRASHED, Status.TIMEOUT] * 4):
        recorded[key] = Measurement.failed(status, f"{status.value} on purpose")
    executor = ReplayExecutor(recorded, capacity=2)
    url = f"sqlite:///{tmp_path / 'progress.db'}"
    ensure_schema(url)
    store = Store.open(url)
    job = SearchOptions(measure=MeasureSpec("mlp.py"), trials=20, seed=0, pruner="none", warm_start=False)
    study = open_study(job, target, store, user="tester")
    printer = SearchPrinter(job.trials)
    printer.searching(study, done=0)
    outcome = Driver(job, target, store=store, executor=executor, on_result=printer.trial_done,
                     on_start=printer.trial_started).run(study)
    printer.close()
    store.close()
    lines = parse(capsys.readouterr().err)
    order = [(kind, int(m["number"])) for kind, m in lines if kind in ("started", "done")]
    assert sorted(n for kind, n in order if kind == "done") == [r.number for r in outcome.trials] == list(range(20))
    for kind, number in order:
        if kind == "done":
            assert order.index(("started", number)) < order.index(("done", number))
    done = [m for kind, m in lines if kind == "done"]
    assert max(int(m["running"]) for m in done) == 1 and done[-1]["done"] == "20"
    failed = Counter(r.measurement.status.value for r in outcome.trials if not r.measurement.ok)
    assert int(done[-1]["failed"]) == sum(failed.values())
    assert failed                   # the seeded search meets some of the broken rows
    counts = [m for kind, m in lines if kind == "failures"][-1]["counts"]
    assert Counter({s: int(c) for s, c in (p.split() for p in counts.split(", "))}) == failed
    ok = [r for r in outcome.trials if r.measurement.ok and r.params]
    best = min(ok, key=lambda r: r.measurement.objective)
    assert [m for kind, m in lines if kind == "best"][-1]["number"] == str(best.number)


def test_the_documented_example_lines_follow_the_grammar() -> None:
    doc = (REPO / "docs" / "search.md").read_text()
    block = doc.split("While trials run", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    kinds = [kind for kind, _ in parse(block)]
    assert kinds == ["started", "done", "phases", "best", "done", "failures"]
