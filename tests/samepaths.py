"""One log, three ways in: replayed by `dltop check`, trickled into a followed file, and
opened huge (tail first, then the charts and the rules backfilled). The diagnosis must
not depend on the way: same alert ids, severities and steps.

Used by tests/rules/test_same_answers.py (logs made here and the fault suite's quick logs).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from dltop.tui.check_file import check_file
from dltop.tui.core.rules.config import Config
from dltop.tui.core.sources.filesource import FileSource
from dltop.tui.core.store.run import RunModel
from waiting import wait_for

# the settle time of these models: long enough that a trickle paused by a busy machine
# is not taken for the end of the run, short enough to keep the tests quick
SETTLE_S = 0.3

Answer = list[tuple[str, str, Any, Any]]


def child_results(monkeypatch: Any) -> list[Any]:
    """What each rules child gave back (``None``: it failed), as its reader took it
    (``rules_worker.RulesJob.result``, noted on its way)."""
    from dltop.tui.core.sources import rules_worker

    got: list[Any] = []
    real = rules_worker.RulesJob.result

    def noting(self: rules_worker.RulesJob) -> Any:
        out = real(self)
        got.append(out)
        return out

    monkeypatch.setattr(rules_worker.RulesJob, "result", noting)
    return got


def answer(alerts: list[Any]) -> Answer:
    """What must match: each alert's id, severity, first and last step, in order raised."""
    return [(a.id, a.severity, a.step, a.last_step) for a in alerts]


def replayed(log: Path) -> Answer:
    return answer(check_file(str(log), Config()).engine.alerts())


def _settle(model: RunModel, src: FileSource, size: int) -> None:
    """Wait until the source has read the whole file and the backfills are done."""
    assert wait_for(
        lambda: src.offset >= size and model.loading is None and model.diagnosing is None,
        timeout=120,
    ), f"source at {src.offset} of {size}, loading {model.loading}, rules {model.diagnosing}"
    # a crashed (vanished) run's last block is judged as check judges it, once no record
    # has come for the model's settle time
    state = model.status()
    if state is not None and state.status == "crashed":
        time.sleep(model.settle_s)
        model.status()


def trickled(log: Path, work: Path, seed: int) -> Answer:
    """The log appended to a followed file in random pieces (lines cut anywhere) while a
    second thread ticks like the viewer's timer (status, alerts, facts)."""
    data = log.read_bytes()
    dest = work / f"trickle-{log.name}"
    dest.write_bytes(b"")
    model = RunModel("trickle", Config())
    model.settle_s = SETTLE_S
    src = FileSource(dest, model, poll_interval=0.005, tail_first=None).start()
    stop = threading.Event()

    def ticks() -> None:
        while not stop.is_set():
            model.status()
            model.alerts()
            model.facts()
            time.sleep(0.003)

    ticker = threading.Thread(target=ticks, daemon=True)
    ticker.start()
    rng = random.Random(seed)
    try:
        with open(dest, "ab", buffering=0) as f:
            i = 0
            while i < len(data):
                n = rng.choice((1, 7, 100, 4096, 65536))
                f.write(data[i : i + n])
                i += n
                if rng.random() < 0.05:
                    time.sleep(0.002)  # let the reader see a partial line now and then
        _settle(model, src, len(data))
    finally:
        stop.set()
        ticker.join(5)
        src.stop()
    return answer(model.alerts())


def opened_huge(log: Path, rules_worker: bool = False) -> Answer:
    """The log opened as a huge one: the tail shown first, the run and its rules backfilled
    (``rules_worker``: the rules in a child process, tui/core/sources/rules_worker.py)."""
    size = os.path.getsize(log)
    model = RunModel("huge", Config())
    model.settle_s = SETTLE_S
    src = FileSource(
        log, model, poll_interval=0.01, tail_first=max(1, size // 4), tail_bytes=size // 8
    )
    src.rules_worker_min = 0 if rules_worker else None
    src.start()
    try:
        _settle(model, src, size)
    finally:
        src.stop()
    return answer(model.alerts())


def failing_python(folder: Any) -> str:
    """A stand-in for ``sys.executable`` whose child takes the job from its stdin, then
    fails (exit 1). ``/bin/false`` exited before the job was written on a loaded machine,
    so the failure came as a broken pipe at the start instead of at the result: a race."""
    import os
    from pathlib import Path

    path = Path(folder) / "failing-python"
    path.write_text("#!/bin/sh\ncat >/dev/null\nexit 1\n")
    os.chmod(path, 0o755)
    return str(path)
