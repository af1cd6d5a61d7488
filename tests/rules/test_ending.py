"""How a run ended, decided once (tui/core/rules/ending.py) and read the same way by every
surface: the run status, the crash banner, the crash catalogue, `dltop check` (text and
JSON, its verdict), `dltop report`, `dltop ls` and the viewer's header."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from dltop.tui import cli
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.present.view_model import ViewState, crash_info, header_info
from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.rules.crashdiag import diagnose
from dltop.tui.core.rules.ending import Ending, event_ending, is_fatal
from dltop.tui.core.sources.discover import describe_log
from dltop.tui.core.store.run import RunModel

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


def _steps(n: int, first: int = 0) -> list[dict]:
    """A run that learns: the loss falls 5 % a step."""
    return [
        {"kind": "step", "step": i, "t": T + i * 0.1, "loss": 2.0 * 0.95**i}
        for i in range(first, first + n)
    ]


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("events", "status", "banner"),
    [
        ([_exit("ok")], "finished", False),
        ([EXC, _exit("exception")], "crashed", True),
        # an exception with no step after it ended the training, whatever the exit record
        # says (an adapter that saw the exit but not the exception writes ok)
        ([EXC, _exit("ok")], "crashed", True),
        ([CTRL_C, _exit("interrupted")], "finished", False),
        ([EXIT0, _exit("ok")], "finished", False),  # sys.exit(0) is no crash, no banner
        ([EXIT3, _exit("exception")], "crashed", True),
        ([TERM], "crashed", True),
        ([INT, _exit("signal")], "finished", False),  # a SIGINT handler that exited
        ([OOM], "crashed", True),
    ],
)
def test_status_banner_and_ls_agree(
    events: list[dict], status: str, banner: bool, tmp_path: Path
) -> None:
    records = [{"kind": "meta", "t": T, "pid": 1, "run_id": "r"}, *_steps(20), *events]
    engine = RuleEngine()
    engine.feed_many(records)
    state = run_state(engine, now=T + 5, pid_alive=None)
    assert state.status == status, state.reason
    model = RunModel("r")
    model.ingest(records)
    assert (crash_info(model, state) is not None) == banner
    assert describe_log(_write(tmp_path, records)).status == status
    for ev in events:
        if ev.get("type") in ("exception", "oom") and not is_fatal(ev):
            assert diagnose(ev) is None, "an interrupt or a clean exit has no crash diagnosis"


# ------------------------------------------------------------------ one judge, every surface


def _check(path: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["check", str(path), *args])
    return code, out.getvalue()


def _surfaces(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """What each surface says of one log: status and verdict."""
    path = _write(tmp_path, records)
    _, text = _check(path)
    _, raw = _check(path, "--json")
    doc = json.loads(raw)
    report = tmp_path / "r.md"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["report", str(path), "-o", str(report)]) == 0
    model = RunModel("r")
    model.ingest(records)
    model.finish()
    now = records[-1]["t"] + 1
    state = model.status(now)
    head = header_info(model, now, ViewState(), follow=False, run_state=state)
    ls = describe_log(path)
    return {
        "check_first_line": text.splitlines()[0],
        "check_status_line": next(ln for ln in text.splitlines() if ln.startswith("status:")),
        "json": (doc["status"], doc["verdict"], doc["reason"]),
        "report": report.read_text(),
        "header": (head.status, head.verdict, head.reason),
        "banner": crash_info(model, state),
        "ls": (ls.status, ls.verdict),
    }


def test_a_handled_exception_is_said_alike_everywhere(tmp_path: Path) -> None:
    """The five-places case: an exception at step 5, more steps, then an ok exit. It used
    to be "crashed ... at step 11" in the status while the banner said "no exception and
    no exit record". Now: finished, the exception handled, no banner, on every surface."""
    exc = dict(EXC, step=5, t=T + 0.55)
    records = [
        {"kind": "meta", "t": T, "pid": 1, "run_id": "r"},
        *_steps(6),
        exc,
        *_steps(6, first=6),
        _exit("ok"),
    ]
    said = _surfaces(tmp_path, records)
    reason = "finished after 12 steps; an exception at step 5 was handled (ValueError: bad)"
    verdict = f"{reason}; no problem found"
    assert said["check_first_line"] == verdict
    assert said["check_status_line"] == f"status:  finished ({reason})"
    assert said["json"] == ("finished", verdict, reason)
    assert f"**Verdict: {verdict}**" in said["report"] and "No crash is on record" in said["report"]
    assert said["header"] == ("finished", verdict, reason)
    assert said["banner"] is None
    assert said["ls"] == ("finished", verdict)


def test_an_ok_exit_after_the_exception_that_ended_training_is_a_crash(tmp_path: Path) -> None:
    """No step after the exception, then an exit record that says ok (a framework's
    callback raised and the caller caught it): crashed, with the banner, everywhere."""
    exc = dict(EXC, step=19, t=T + 2)
    records = [{"kind": "meta", "t": T, "pid": 1, "run_id": "r"}, *_steps(20), exc, _exit("ok")]
    said = _surfaces(tmp_path, records)
    assert said["json"][0] == "crashed" and said["ls"][0] == "crashed"
    assert said["header"][0] == "crashed"
    assert said["banner"] is not None and said["banner"].step == 19
    assert said["check_first_line"] == said["json"][1] == said["header"][1] == said["ls"][1]
    assert said["check_first_line"].startswith("crashed at step 19")


def test_a_run_that_ends_nan_is_never_finished_normally(tmp_path: Path) -> None:
    nan = [{"kind": "step", "step": i, "t": T + i * 0.1, "loss": "NaN"} for i in range(20, 40)]
    records = [{"kind": "meta", "t": T, "pid": 1, "run_id": "r"}, *_steps(20), *nan, _exit("ok")]
    said = _surfaces(tmp_path, records)
    status, verdict, reason = said["json"]
    assert status == "finished" and "normally" not in reason
    assert reason == "finished after 40 steps; the loss is NaN at the end since step 20"
    assert verdict.startswith("Loss is NaN since step 20 (20 of 40 steps)")
    assert said["header"][1] == verdict == said["ls"][1] == said["check_first_line"]
