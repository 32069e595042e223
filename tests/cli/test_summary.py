"""The summary's "stored: Inductor's defaults (...)" line names the note that kept the defaults,
not a note the process stage added after it (`tuner.cli.summary`)."""
from __future__ import annotations

from types import SimpleNamespace

from tuner.cli.summary import _why_defaults
from tuner.trial import Speedup

CLAIM_NOTE = ("tuned #2 minimal did not clear the noise against the default compile in the claim run, a process "
              "that did not choose it (1.02x [0.96, 1.06] in the half of its rounds that decides), so Inductor's "
              "defaults stay")
STAGE_NOTE = ("in fresh processes, as a user runs it, it was faster by the median but not beyond the noise between "
              "processes (1.14x [0.88, 1.24] in the half of the rounds that decides); what it was chosen on cleared "
              "the noise, so it is kept, with the figure those processes give")


def _verdict(*notes: str) -> SimpleNamespace:
    """What `_why_defaults` reads of a Verdict: one finalist that cleared the noise in the held-out rounds."""
    return SimpleNamespace(finalists=(SimpleNamespace(label="tuned #2"),), notes=notes,
                           held_out=lambda label: Speedup(1.04, 1.03, 1.06, 10))


def test_the_defaults_are_explained_by_the_note_that_kept_them() -> None:
    """A training search stored the defaults (the claim run) with tcmalloc (the process stage), whose
    note came last: the line printed the stage's "so it is kept" as the reason the defaults stayed."""
    line = _why_defaults(_verdict(CLAIM_NOTE, STAGE_NOTE), ["tuned #2 1.04x [1.03, 1.06]"])
    assert line.endswith(CLAIM_NOTE) and "so it is kept" not in line, line


def test_without_such_a_note_the_other_half_chose_the_defaults() -> None:
    line = _why_defaults(_verdict("2 configs could not be told apart from the fastest"), ["tuned #2 1.04x"])
    assert line.endswith("a gain seen in one half only is not stored"), line
