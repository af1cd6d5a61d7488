"""How a run ended, decided once (tui/core/ending.py) and read the same way by the run
status, the crash banner, the crash catalogue and `dltop ls`."""

from __future__ import annotations

import pytest
from dltop.tui.core.crashdiag import diagnose
from dltop.tui.core.discover import _step_and_status
from dltop.tui.core.ending import Ending, event_ending, is_fatal
from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.run import RunModel
from dltop.tui.core.view_model import crash_info

T = 1_700_000_000.0
EXC = {"kind": "event", "type": "exception", "exc_type": "ValueError", "message": "bad", "t": T}
OOM = {"kind": "event", "type": "oom", "exc_type": "torch.OutOfMemoryError", "message": "CUDA out of memory", "t": T}  # fmt: skip
CTRL_C = {"kind": "event", "type": "exception", "exc_type": "KeyboardInterrupt", "interrupted": True, "t": T}  # fmt: skip
EXIT0 = {"kind": "event", "type": "exception", "exc_type": "SystemExit", "exit_code": 0, "t": T}
EXIT3 = {"kind": "event", "type": "exception", "exc_type": "SystemExit", "exit_code": 3, "t": T}
TERM = {"kind": "event", "type": "signal", "signal": "SIGTERM", "t": T}
INT = {"kind": "event", "type": "signal", "signal": "SIGINT", "t": T}


def _exit(status: str) -> dict:
    return {"kind": "event", "type": "exit", "status": status, "t": T + 1}


@pytest.mark.parametrize(
    ("event", "want"),
    [
        (EXC, Ending.CRASHED), (OOM, Ending.OOM), (CTRL_C, Ending.INTERRUPTED),
        (EXIT0, Ending.FINISHED), (EXIT3, Ending.CRASHED), (TERM, Ending.SIGNALLED),
        (INT, Ending.INTERRUPTED), (_exit("ok"), Ending.FINISHED),
        (_exit("interrupted"), Ending.INTERRUPTED), (_exit("signal"), Ending.SIGNALLED),
        ({"kind": "event", "type": "note", "text": "x"}, None),
    ],
)  # fmt: skip
def test_each_event_says_one_thing(event: dict, want: Ending | None) -> None:
    assert event_ending(event) == want
    assert is_fatal(event) == (want in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED))


def _steps(n: int) -> list[dict]:
    return [{"kind": "step", "step": i, "t": T + i * 0.1, "loss": 1.0} for i in range(n)]


@pytest.mark.parametrize(
    ("events", "status", "banner"),
    [
        ([_exit("ok")], "finished", False),
        ([EXC, _exit("exception")], "crashed", True),
        ([EXC, _exit("ok")], "crashed", True),  # the crash stays the news
        ([CTRL_C, _exit("interrupted")], "finished", False),
        ([EXIT0, _exit("ok")], "finished", False),  # sys.exit(0) is no crash, no banner
        ([EXIT3, _exit("exception")], "crashed", True),
        ([TERM], "crashed", True),
        ([INT, _exit("signal")], "finished", False),  # a SIGINT handler that exited
        ([OOM], "crashed", True),
    ],
)
def test_status_banner_and_ls_agree(events: list[dict], status: str, banner: bool) -> None:
    records = [{"kind": "meta", "t": T, "pid": 1, "run_id": "r"}, *_steps(20), *events]
    engine = RuleEngine()
    engine.feed_many(records)
    state = engine.status(now=T + 5, pid_alive=None)
    assert state.status == status, state.reason
    model = RunModel("r")
    model.ingest(records)
    assert (crash_info(model, state) is not None) == banner
    assert _step_and_status(records, T + 5, None)[1] == status
    for ev in events:
        if ev.get("type") in ("exception", "oom") and not is_fatal(ev):
            assert diagnose(ev) is None, "an interrupt or a clean exit has no crash diagnosis"
