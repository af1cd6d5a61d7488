"""Overload and sudden death: no silent loss, no long block, a log that always parses.

Before: the writer queue was a ``deque(maxlen=2**18)``: past it the *oldest* records
vanished with no word, ``check`` said "finished normally", and a full queue of
GC-tracked tuples made one ``step()`` wait 100+ ms for a gen-2 collection. Now the
queue drops the *new* record and counts it, a ``dropped`` event of scope ``log`` marks
each gap where it is, the exit record carries the total, ``check`` warns with the
count (``records_dropped``), the viewer's header says it, and the queued tuples are
plain numbers the collector stops tracking.
"""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dltop.probe import Probe, rendezvous
from dltop.probe.decoding import read_records
from dltop.probe.filesink import FileSink
from dltop.probe.writer import Writer
from dltop.tui.check_file import check_file
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.present.view_model import ViewState, header_info
from dltop.tui.core.rules.config import Config
from dltop.tui.core.rules.engine import RuleEngine
from waiting import wait_for


@pytest.fixture
def runtime(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private rendezvous dir for the probes of this test (kept out of `dltop ls`)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    return short_dir


def _events(path: Path) -> list[dict]:
    records, _ = read_records(str(path))
    return records


def test_a_full_queue_drops_new_records_counts_them_and_marks_the_gap(tmp_path: Path) -> None:
    log = tmp_path / "w.jsonl"
    w = Writer([FileSink(str(log))], heartbeat=None, queue_max=10)
    for i in range(25):  # the thread is not running yet: the queue fills
        w.put({"kind": "step", "step": i, "t": 1.0, "step_time": 0.1})
    assert w.dropped == 15
    w.start()
    assert w.flush(timeout=10)
    for i in range(25, 28):  # room again: kept, after the gap
        w.put({"kind": "step", "step": i, "t": 1.0, "step_time": 0.1})
    w.close()
    recs = _events(log)
    kinds = [r["step"] if r["kind"] == "step" else r["type"] for r in recs]
    assert kinds == [*range(10), "dropped", 25, 26, 27], "the oldest are kept, the gap marked"
    (gap,) = [r for r in recs if r["kind"] == "event"]
    assert gap["scope"] == "log" and gap["records"] == 15 and gap["total"] == 15
    assert any("outran the log writer" in m for m in w.warnings), "said once on stderr"


def test_two_gaps_are_two_events_each_where_it_happened(tmp_path: Path) -> None:
    log = tmp_path / "w.jsonl"
    w = Writer([FileSink(str(log))], heartbeat=None, queue_max=4)
    with w._lock:  # the writer thread waits: nothing leaves the queue
        w.start()
        for i in range(6):
            w.put({"kind": "step", "step": i, "t": 1.0})
    assert w.flush(timeout=10)
    with w._lock:
        for i in range(6, 13):
            w.put({"kind": "step", "step": i, "t": 1.0})
    w.close()
    recs = _events(log)
    kinds = [r["step"] if r["kind"] == "step" else r["records"] for r in recs]
    # the first gap's marker still held a place in the queue (one drain moves at most
    # queue_max items): 6, 7, 8 kept, 9-12 dropped as a second gap after them
    assert kinds == [0, 1, 2, 3, 2, 6, 7, 8, 4]
    assert [r["total"] for r in recs if r["kind"] == "event"] == [2, 6]
    assert w.dropped == 6


def test_queued_steps_are_not_tracked_by_the_garbage_collector(tmp_path: Path) -> None:
    """A full queue of 262 144 steps must not make a gen-2 collection (which runs on the
    training thread) walk every one of them: plain-number tuples are untracked."""
    with Probe(path=str(tmp_path / "r.jsonl"), system=False, socket=False) as probe:
        w = probe._writer
        assert w is not None
        with w._lock:
            for i in range(1000):
                probe.step(loss=1.0 / (i + 1), lr=1e-3)
            gc.collect(0)
            queued = [x for x in w._queue if type(x) is tuple]
            assert len(queued) == 1000
            assert not any(gc.is_tracked(x) for x in queued)


def _overflowed(log: Path) -> int:
    """300 000 steps while the writer is held: 262 144 fit the queue, the rest is dropped
    and counted (returned)."""
    with Probe(path=str(log), system=False, socket=False) as probe:
        w = probe._writer
        assert w is not None
        with w._lock:
            for i in range(300_000):
                probe.step(loss=1.0 / (i + 1))
        return w.dropped


@pytest.mark.slow
def test_check_and_the_viewer_report_the_missing_records(tmp_path: Path) -> None:
    log = tmp_path / "r.jsonl"
    lost = _overflowed(log)
    assert lost == 300_000 - 262_144
    recs = _events(log)
    assert sum(r["kind"] == "step" for r in recs) + lost == 300_000
    (exit_rec,) = [r for r in recs if r.get("type") == "exit"]
    assert exit_rec["dropped"] == lost
    res = check_file(str(log), Config())
    (alert,) = [a for a in res.engine.alerts() if a.id == "records_dropped"]
    assert alert.severity == "warning" and alert.evidence["records"] == lost
    assert f"{lost} records" in alert.title
    assert alert.evidence["first_gap_after_step"] == 262_143
    # the viewer's header says so (not as a viewer-side drop)
    from dltop.tui.core.store.run import RunModel

    model = RunModel("r")
    model.ingest(recs)
    info = header_info(model, time.time(), ViewState(), follow=False)
    assert info.lost == lost and info.dropped == 0


@pytest.mark.slow
def test_the_status_counts_the_steps_the_log_lacks(tmp_path: Path) -> None:
    """Issue 29 (12): after dropped records the status said "finished after 262144 steps"
    while the exit record said 300000: the run's step count is the exit record's, and the
    status says how many of them the log lacks, in `check` and in the viewer."""
    from dltop.tui.core.store.run import RunModel

    log = tmp_path / "r.jsonl"
    _overflowed(log)
    said = "finished after 300000 steps, 37856 of them not in the log"
    res = check_file(str(log), Config())
    assert res.state.status == "finished" and res.state.reason == said
    model = RunModel("r")
    model.ingest(_events(log))
    status = model.status(time.time())
    assert status is not None and status.reason == said
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert f"status:  finished ({said})" in done.stdout, done.stdout


def test_without_drops_the_status_counts_the_steps_in_the_log() -> None:
    e = RuleEngine()
    e.feed({"kind": "meta", "t": 1.0, "pid": 1})
    for i in range(20):
        e.feed({"kind": "step", "step": i, "t": 1.0 + i, "loss": 1.0})
    e.feed({"kind": "event", "type": "exit", "status": "ok", "steps": 25, "t": 30.0})
    assert run_state(e).reason == "finished after 20 steps"  # no drop on record: the log's


def test_a_viewer_side_drop_is_no_alert_about_the_run() -> None:
    e = RuleEngine()
    e.feed({"kind": "meta", "t": 1.0, "pid": 1})
    for i in range(50):
        e.feed({"kind": "step", "step": i, "t": 1.0 + i, "loss": 1.0, "step_time": 0.1})
    e.feed({"kind": "event", "type": "dropped", "scope": "viewer", "records": 9, "t": 60.0})
    e.feed({"kind": "event", "type": "dropped", "records": "many", "t": 60.0})
    assert [a.id for a in e.alerts()] == []


TRAINER = textwrap.dedent(
    """
    import json, sys, time
    import dltop.probe.writer
    from dltop.probe import Probe
    # a small queue: full speed outruns the writer on any disk, so the drop path runs
    dltop.probe.writer.QUEUE_MAX = 2048
    seconds = float(sys.argv[2])
    calls = 0
    worst = 0.0
    pc = time.perf_counter
    with Probe(path=sys.argv[1], system=False, run_id="overload") as probe:
        print("ready", flush=True)
        sys.stdin.readline()  # the viewers are connected
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(1000):
                t0 = pc()
                probe.step(loss=1.0 / (calls + 1))
                dt = pc() - t0
                if dt > worst:
                    worst = dt
                calls += 1
    print(json.dumps({"calls": calls, "worst_s": worst}), flush=True)
    """
)


@pytest.mark.slow
def test_full_speed_with_a_stuck_client_and_a_live_viewer(tmp_path: Path, runtime: Path) -> None:
    """A real process steps as fast as it can for 3 s with its socket on; one client connects
    and never reads, a real viewer follows the socket. Every call is in the log or counted
    in its dropped events, check warns with the count, training never waited long."""
    from dltop.tui.core.sources.socket_source import SocketSource
    from dltop.tui.core.store.run import RunModel

    log = tmp_path / "fast.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(log), "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    model = RunModel("r")
    src = None
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        (run,) = [r for r in rendezvous.list_runs() if r["pid"] == proc.pid]
        address = f"unix:{run['socket']}"
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(address.removeprefix("unix:"))
        src = SocketSource(address, model, poll_interval=0.02, fallback_to_file=False).start()
        assert wait_for(lambda: model.meta is not None, timeout=30), "the viewer is connected"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
    finally:
        stuck.close()
        proc.kill()
        if src is not None:
            src.stop()
    recs = _events(log)
    steps = sum(r["kind"] == "step" for r in recs)
    gaps = [r for r in recs if r.get("type") == "dropped" and r.get("scope") == "log"]
    lost = sum(r["records"] for r in gaps)
    assert steps + lost == result["calls"], "every call is in the log or counted"
    assert lost > 0, "full speed outruns the writer: the drop path really ran"
    assert result["worst_s"] < 1.0, f"a step() call blocked {result['worst_s']:.3f} s"
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # warnings only
    report = json.loads(done.stdout)
    (alert,) = [a for a in report["alerts"] if a["id"] == "records_dropped"]
    assert alert["evidence"]["records"] == lost
    print(
        f"\nfull speed 3 s: {result['calls']:,} calls, {steps:,} in the log, {lost:,} dropped "
        f"in {len(gaps)} gap(s), longest step() {result['worst_s'] * 1e3:.1f} ms"
    )


KILLED = textwrap.dedent(
    """
    import sys
    from dltop.probe import Probe
    with Probe(path=sys.argv[1], run_id="killed") as probe:
        print("ready", flush=True)
        i = 0
        while True:
            probe.step(loss=1.0 / (i + 1), lr=1e-3, acc=0.5)
            if i % 5000 == 0:
                probe.eval(val_loss=1.0)
            i += 1
    """
)


@pytest.mark.slow
def test_sigkill_at_random_moments_always_leaves_a_log_that_parses(
    tmp_path: Path, runtime: Path
) -> None:
    """Ten trainings killed at a seeded random moment: every log parses to its last line
    (at most a cut final line, counted, never an exception) and reads as a killed run."""
    rng = random.Random(20261124)
    for trial in range(10):
        log = tmp_path / f"k{trial}.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        recs, dec = read_records(str(log))
        malformed = dec.malformed
        assert recs and recs[0]["kind"] == "meta", f"trial {trial}"
        assert malformed <= 1, f"trial {trial}: at most the cut last line ({malformed})"
        res = check_file(str(log), Config())
        assert res.state.status == "crashed", (trial, res.state.reason)
        assert "SIGKILL" in res.state.reason


def test_a_queued_step_has_the_layout_records_declares(tmp_path: Path) -> None:
    """Probe.step packs the tuple that StepRecords.build unpacks: one layout, STEP_ITEM."""
    from dltop.probe.records import STEP_ITEM

    with Probe(path=str(tmp_path / "r.jsonl"), system=False, socket=False) as probe:
        w = probe._writer
        assert w is not None
        with w._lock:
            probe.step(loss=1.5, lr=0.25, batch_size=8, step=7, acc=0.5)
            (item,) = [x for x in w._queue if type(x) is tuple]
    got = dict(zip(STEP_ITEM, item, strict=True))
    assert got["builder"] == probe._step_builder and got["step"] == 7
    assert got["loss"] == 1.5 and got["lr"] == 0.25 and got["batch_size"] == 8
    assert got["extras"] == {"acc": 0.5} and got["grad_norm"] is None
    assert got["step_time"] >= 0 and got["memory"] is None and got["device"] is None
    rec = probe._records.build(item, False)
    assert rec is not None and rec["step"] == 7 and rec["acc"] == 0.5 and rec["batch_size"] == 8


# -- a flood of events (issue 29, 3): the store kept every event; a socket sending notes
# took the viewer to 1.3 GB in 15 s and `dltop report` to 514 MB on an 88 MB log

NOTES = textwrap.dedent(
    """
    import sys
    from dltop.probe import Probe
    n = int(sys.argv[2])
    serve = sys.argv[3] == "socket"
    with Probe(path=sys.argv[1], system=False, socket=serve, run_id="notes") as probe:
        if serve:
            print("ready", flush=True)
            sys.stdin.readline()  # the viewer is connected
        for i in range(50):
            probe.step(loss=1.0 / (i + 1))
        with probe.phase("eval"):
            probe.eval(loss=0.5)
        for i in range(n):
            probe.note(f"note {i}")
        for i in range(50, 60):
            probe.step(loss=0.01)
    """
)


def _kept_types(model) -> dict[str, int]:
    from collections import Counter

    return dict(Counter(e.get("type") for e in model.store.events))


def test_a_flood_of_note_events_keeps_the_ends_counts_the_rest_and_says_so(
    tmp_path: Path,
) -> None:
    """A real probe writes 30 000 notes between its steps. The viewer's core keeps the
    first and last 100 notes, every event that says how the run went (phases, exit),
    counts all of them, and its header and the report say what was kept."""
    from dltop.tui.core.store.run import RunModel

    log = tmp_path / "notes.jsonl"
    subprocess.run(
        [sys.executable, "-c", NOTES, str(log), "30000", "file"], check=True, timeout=120
    )
    recs = _events(log)
    model = RunModel("notes")
    for i in range(0, len(recs), 4096):  # as a source feeds it: one parsed chunk at a time
        model.ingest(recs[i : i + 4096])
    store = model.store
    assert store.event_log.counts["note"] == 30_000
    kinds = _kept_types(model)
    assert kinds["note"] == 200
    assert kinds["phase"] == 2 and kinds["exit"] == 1  # what a rule or the report reads
    texts = [e["text"] for e in store.events if e.get("type") == "note"]
    assert texts == [f"note {i}" for i in (*range(100), *range(29_900, 30_000))]
    said = "30000 note events, the first and last 100 kept"
    assert said in header_info(model, time.time(), ViewState(), follow=False).mode
    assert model.status().status == "finished"  # the rules saw every event as it passed
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "report", str(log)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert said in Path(done.stdout.strip()).read_text()


def test_events_kept_are_capped_in_bytes_whatever_their_size() -> None:
    """A line may be 8 MiB: counts alone bound nothing. 60 notes of 1 MiB each keep at
    most MAX_BYTES of them, the newest, and the note says the cap bit."""
    from dltop.tui.core.store import eventlog
    from dltop.tui.core.store.runstore import Store

    store = Store()
    big = "x" * (1 << 20)  # one string shared: the test holds 1 MiB, the store counts 60
    store.ingest([{"kind": "meta", "t": 1.0, "pid": 1}])
    store.ingest(
        [{"kind": "event", "type": "note", "t": 2.0 + i, "i": i, "text": big} for i in range(60)]
    )
    log = store.event_log
    assert log.held <= eventlog.MAX_BYTES
    kept = [e["i"] for e in store.events]
    assert 0 < len(kept) < 60 and kept[0] == 0 and kept[-1] == 59  # the first, the newest
    assert "60 note events" in log.note() and "capped at 16 MiB" in log.note()
    # the last notes fill the budget; then the first exception, a big one, is taken (first
    # events of a type are always taken while half the budget holds): the notes give way
    store = Store()
    store.ingest([{"kind": "event", "type": "note", "t": 1.0, "text": ""}] * 100)
    mid = "y" * (200 << 10)
    store.ingest([{"kind": "event", "type": "note", "t": 2.0, "text": mid}] * 100)
    store.ingest([{"kind": "event", "type": "exception", "t": 3.0, "text": big}])
    assert store.event_log.held <= eventlog.MAX_BYTES
    assert store.events[-1]["type"] == "exception"


def test_a_note_flood_over_a_live_socket_keeps_the_viewer_bounded(
    tmp_path: Path, runtime: Path
) -> None:
    """The symptom as filed: a live run sends notes over its socket as fast as it can;
    the viewer that follows it keeps the first and last 100 of them, whatever it got."""
    from dltop.tui.core.sources.socket_source import SocketSource
    from dltop.tui.core.store.run import RunModel

    log = tmp_path / "live.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", NOTES, str(log), "100000", "socket"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    model = RunModel("live")
    src = None
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        (run,) = [r for r in rendezvous.list_runs() if r["pid"] == proc.pid]
        src = SocketSource(
            f"unix:{run['socket']}",
            model,
            poll_interval=0.02,
            reconnect=False,
            fallback_to_file=False,
        ).start()
        assert wait_for(lambda: model.meta is not None, timeout=30), "the viewer is connected"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert wait_for(lambda: not src.alive, timeout=60), "the stream ended with the run"
    finally:
        proc.kill()
        if src is not None:
            src.stop()
    events = model.store.event_log
    # the viewer may fall behind and be skipped batches (counted in src.dropped): what it
    # got went through the store, which kept the first and last 100 notes only
    assert events.counts["note"] > 10_000
    assert _kept_types(model)["note"] == 200
    assert events.held < 100_000  # bytes: 200 short notes and a few other events
