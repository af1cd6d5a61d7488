"""The run's status and its verdict agree on how it ended, for every way a log can end.

The status (``diagnosis.status`` over ``rules.ending``) and the crash rule's alert (what
the verdict names) used to disagree at the edges: a SIGTERM a handler took, then more
steps, read "running" with the verdict "killed at step 99"; a KeyboardInterrupt then an
exit that says ``signal`` read "interrupted by the user" beside an active "Run terminated
by a signal"; an exception the run went on after, then an exit record saying exception,
read "crashed" while `dltop check` exited 0 (no alert above information). Each event that
can end a run, with and without steps after it, under each exit record (or none).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.diagnosis.verdict import verdict
from dltop.tui.core.rules.alerts import SEVERITY_RANK
from rulekit import Run, run_engine

EVENTS: dict[str, dict[str, Any]] = {
    "sigterm": {"type": "signal", "signal": "SIGTERM"},
    "sighup": {"type": "signal", "signal": "SIGHUP"},
    "sigint": {"type": "signal", "signal": "SIGINT"},
    "exception": {"type": "exception", "exc_type": "ValueError", "message": "bad"},
    "ctrl_c": {"type": "exception", "exc_type": "KeyboardInterrupt", "interrupted": True},
    "oom": {
        "type": "oom",
        "exc_type": "torch.OutOfMemoryError",
        "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
    },
    "exit_0": {"type": "exception", "exc_type": "SystemExit", "message": "0"},
}
ENDS = (None, "ok", "signal", "exception", "interrupted")
FAILED_WORDS = ("crashed", "killed", "out of")


@pytest.mark.parametrize(("event", "after", "end"), list(itertools.product(EVENTS, (0, 20), ENDS)))
def test_the_status_and_the_verdict_agree(event: str, after: int, end: str | None) -> None:
    rec = {"kind": "event", "t": 0.0, **EVENTS[event]}
    eng = run_engine(Run(steps=100 + after, extra_records={99: [rec]}, end=end))
    state = run_state(eng)
    said = verdict(eng, state)
    failing = [
        a
        for a in eng.alerts()
        if a.id in ("crash", "oom") and a.active and SEVERITY_RANK[a.severity] >= 1
    ]
    if state.status in ("running", "finished"):
        assert not failing, (state.status, failing)
        assert not said.startswith(FAILED_WORDS), (state.status, said)
    else:  # and `dltop check`, whose exit code is the worst alert's, does not exit 0
        assert state.status == "crashed"
        assert said.startswith(FAILED_WORDS), said
        assert failing, (state.reason, said)
