"""The step a crash record names is the one whose record precedes it in the log.

A signal is taken between bytecodes, so it can land inside ``Probe.step()`` while the
step's record is being queued: before the record reaches the queue, or after it is
there but before the probe has noted the step as reached. Each window is opened here on
purpose, by a ``put`` that sends the signal on one side of the real one (the CI flake
this replaces hit the first window by chance, in one CI run).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from dltop.probe import Probe
from dltop.probe.crash import RECORDED_SIGNALS
from dltop.probe.decoding import read_records
from dltop.probe.schema import EV_SIGNAL, EVENT


@pytest.mark.parametrize("window", ["before the append", "after the append"])
def test_a_signal_while_a_step_is_queued_names_the_step_before_it_in_the_log(
    tmp_path: Path, window: str
) -> None:
    saved = {s: signal.getsignal(s) for s in RECORDED_SIGNALS}
    got: list[int] = []
    log = tmp_path / "run.jsonl"
    try:
        # the user's handler: the probe records the signal, then hands it on (no death)
        signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
        with Probe(path=str(log), socket=False, system=False) as probe:
            for _ in range(5):
                probe.step(loss=1.0)
            real = probe._put
            assert real is not None

            def put(item: Any) -> None:
                if window == "after the append":
                    real(item)
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10_000):  # the handler runs between bytecodes: here
                    if got:
                        break
                if window == "before the append":
                    real(item)

            probe._put = put
            probe.step(loss=1.0)  # step 5
            probe._put = real
            probe.step(loss=1.0)  # step 6: the run goes on (the user's handler let it)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert got == [signal.SIGTERM]
    records, dec = read_records(str(log))
    assert dec.malformed == 0
    (ev,) = [r for r in records if r["kind"] == EVENT and r["type"] == EV_SIGNAL]
    before = [r["step"] for r in records[: records.index(ev)] if r["kind"] == "step"]
    assert before == list(range(6 if window == "after the append" else 5))
    assert ev["step"] == before[-1]
    assert [r["step"] for r in records if r["kind"] == "step"] == list(range(7))


def test_a_ctrl_c_raised_inside_the_queueing_names_the_step_whose_record_is_in_the_log(
    tmp_path: Path,
) -> None:
    """SIGINT's default handler raises KeyboardInterrupt after the append: ``step()`` never
    notes step 5 as reached, yet its record is queued; the crash record names it."""
    saved = {s: signal.getsignal(s) for s in RECORDED_SIGNALS}
    log = tmp_path / "run.jsonl"
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with (
            pytest.raises(KeyboardInterrupt),
            Probe(path=str(log), socket=False, system=False) as probe,
        ):
            for _ in range(5):
                probe.step(loss=1.0)
            real = probe._put
            assert real is not None

            def put(item: Any) -> None:
                real(item)
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10_000):
                    pass

            probe._put = put
            probe.step(loss=1.0)  # step 5: interrupted inside its put
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert probe.last_step == 5  # the line after put never ran: the crash record set it
    records, _ = read_records(str(log))
    events = [r for r in records if r["kind"] == EVENT and r["type"] in (EV_SIGNAL, "exception")]
    assert events, records[-3:]
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert steps == list(range(6))
    for ev in events:
        assert ev["step"] == 5, ev
    (exit_ev,) = [r for r in records if r["kind"] == EVENT and r["type"] == "exit"]
    assert exit_ev["step"] == 5 and exit_ev["status"] == "interrupted", exit_ev
