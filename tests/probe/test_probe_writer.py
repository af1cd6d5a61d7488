"""The writer: complete lines only, and a write failure never stops the training."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dltop.probe import Probe
from dltop.probe.decoding import LineDecoder, read_records


def _all_lines_parse(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the log ends in a partial line"
    dec = LineDecoder()
    recs = dec.feed(data)
    assert dec.malformed == 0 and dec.pending == 0
    return recs


class ListSink:
    """A second sink that keeps what it receives, and can be told to fail."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.batches: list[bytes] = []
        self.fail_after = fail_after
        self.closed = False

    def write(self, batch: bytes) -> None:
        if self.fail_after is not None and len(self.batches) >= self.fail_after:
            raise BrokenPipeError("viewer went away")
        self.batches.append(batch)

    def close(self) -> None:
        self.closed = True

    def records(self) -> list[dict]:
        dec = LineDecoder()
        out = dec.feed(b"".join(self.batches))
        assert dec.malformed == 0 and dec.pending == 0
        return out


@pytest.mark.slow
def test_file_size_limit_warns_once_and_training_completes(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    limit = 16 * 1024
    script = textwrap.dedent(
        f"""
        import resource, signal, time
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        import torch
        from dltop.probe import Probe
        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with Probe(path={str(log)!r}, model=model, optimizer=opt, system=False) as probe:
            for i in range(600):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss, note_field=i)
                if i % 100 == 0:
                    time.sleep(0.06)  # let the writer run into the limit mid-training
        print("trained", i + 1)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "trained 600"
    warnings = [line for line in out.stderr.splitlines() if line.startswith("dltop: warning:")]
    assert len(warnings) == 1, out.stderr
    assert "File too large" in warnings[0]
    assert log.stat().st_size <= limit
    recs = _all_lines_parse(log)  # the cut batch was taken back: no partial line
    steps = [r for r in recs if r["kind"] == "step"]
    assert recs[0]["kind"] == "meta" and 0 < len(steps) < 600
    assert [r["step"] for r in steps] == list(range(len(steps)))


def test_fd_closed_and_reused_under_the_writer(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    other = tmp_path / "someone_elses.txt"
    spare = ListSink()
    probe = Probe(path=log, system=False, sinks=[spare]).start()
    for i in range(10):
        probe.step(loss=float(i))
    assert probe.flush()
    fd = probe._writer.sinks[0].fd  # the FileSink's descriptor
    os.close(fd)  # user code closing descriptors it does not own
    reuse = os.open(other, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert reuse == fd  # the number now belongs to another file
        for i in range(10, 20):
            probe.step(loss=float(i))
        probe.flush()
        probe.close()
        assert other.read_bytes() == b""  # nothing of ours went into it
        os.fstat(reuse)  # and the probe did not close it
    finally:
        os.close(reuse)
    assert len(probe.warnings) == 1 and "closed" in probe.warnings[0]
    file_steps = [r["step"] for r in read_records(str(log))[0] if r["kind"] == "step"]
    assert file_steps == list(range(10))
    kept = spare.records()  # the other sink got everything, and the warning
    assert [r["step"] for r in kept if r["kind"] == "step"] == list(range(20))
    assert [r["type"] for r in kept if r["kind"] == "event"] == ["warning", "exit"]


def test_failing_sink_is_dropped_once_and_the_file_goes_on(tmp_path: Path, capfd) -> None:
    log = tmp_path / "run.jsonl"
    bad = ListSink(fail_after=1)
    with Probe(path=log, system=False, sinks=[bad]) as probe:
        for i in range(5):
            probe.step(loss=float(i))
            probe.flush()
    err = capfd.readouterr().err
    assert err.count("dltop: warning:") == 1 and "viewer went away" in err
    recs = _all_lines_parse(log)
    assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(5))
    warn = [r for r in recs if r.get("type") == "warning"]
    assert len(warn) == 1 and "ListSink" in warn[0]["message"]
    assert bad.closed


def test_flush_blocks_until_written_and_events_go_out_at_once(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    # a writer that would otherwise only look at its queue every 10 s
    with Probe(path=log, system=False) as probe:
        probe._writer._wake_every = 10.0
        for i in range(1000):
            probe.step(loss=float(i))
        assert probe.flush(fsync=True)
        steps = [r for r in _all_lines_parse(log) if r["kind"] == "step"]
        assert len(steps) == 1000
        probe.note("now")
        for _ in range(200):  # an event wakes the writer: well under its 10 s tick
            if b'"note"' in log.read_bytes():
                break
            import time

            time.sleep(0.01)
        assert b'"note"' in log.read_bytes()


def test_every_line_parses_under_a_fast_loop(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with Probe(path=log, system=False, heartbeat_every=0.01) as probe:
        for i in range(20000):
            probe.step(loss=float(i) if i % 7 else float("nan"), extra=i)
    recs = _all_lines_parse(log)
    steps = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in steps] == list(range(20000))
    assert recs[-1]["type"] == "exit"


def test_unwritable_path_warns_and_the_training_goes_on(tmp_path: Path, capfd) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with Probe(path=blocker / "run.jsonl", system=False) as probe:  # a file where a folder must be
        probe.step(loss=1.0)
    assert capfd.readouterr().err.count("dltop: warning: cannot open") == 1


@pytest.mark.parametrize("fsync", [False, True])
def test_flush_after_close_is_harmless(tmp_path: Path, fsync: bool) -> None:
    probe = Probe(path=tmp_path / "run.jsonl", system=False).start()
    probe.step(loss=1.0)
    probe.close()
    assert probe.flush(fsync=fsync)
    probe.step(loss=2.0)  # after close: ignored, never raises
    assert [r["kind"] for r in read_records(str(tmp_path / "run.jsonl"))[0]] == [
        "meta",
        "step",
        "event",
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_never_writes_into_the_parents_log(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with Probe(path=log, system=False, crash=False) as probe:
        probe.step(loss=1.0)
        probe.flush()
        pid = os.fork()
        if pid == 0:  # a DataLoader worker, say: its records and flushes go nowhere
            try:
                probe.note("from the child")
                probe.step(loss=99.0)
                probe.flush(fsync=True, timeout=1.0)
                probe.close("exception")
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        probe.step(loss=2.0)
    recs = _all_lines_parse(log)
    assert [r.get("loss") for r in recs if r["kind"] == "step"] == [1.0, 2.0]
    assert not [r for r in recs if r.get("type") == "note"]
    assert [r["status"] for r in recs if r.get("type") == "exit"] == ["ok"]


class _NeverDone:
    """A CUDA event of a hung device: ``query()`` never says the copy has landed."""

    def query(self) -> bool:
        return False


def _stuck_readback():
    """A real ``DeviceBatch`` whose copy is in flight forever (no GPU needed)."""
    from dltop.probe.readback import DeviceBatch

    batch = DeviceBatch.__new__(DeviceBatch)
    batch._host, batch._values, batch.timing_event = None, None, None
    batch._event = _NeverDone()
    return batch


def _stuck_writer(log: Path, n: int):
    """A writer with ``n`` step records waiting on read-backs that never complete."""
    from dltop.probe.filesink import FileSink
    from dltop.probe.records import build_lazy
    from dltop.probe.writer import Writer

    w = Writer([FileSink(str(log))], heartbeat=None)
    w.start()
    lazy = w.register(build_lazy)
    for i in range(n):
        rec = {"kind": "step", "step": i, "t": 0.0, "step_time": 0.1}
        w.put((lazy, rec, ["loss"], _stuck_readback()))
    return w


def test_a_crash_flush_writes_the_event_behind_stuck_read_backs(tmp_path: Path) -> None:
    """Six hung read-backs share one bounded wait: the signal event reaches the log in time."""
    log = tmp_path / "run.jsonl"
    w = _stuck_writer(log, 6)
    try:
        w.emit({"kind": "event", "type": "signal", "t": 0.0, "signal": "SIGTERM", "step": 5})
        assert w.flush(fsync=True, timeout=3.0)  # what the crash path waits for
        recs = _all_lines_parse(log)  # read now, while the writer is still running
        kinds = [(r["kind"], r.get("type")) for r in recs]
        assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(6))
        assert all("loss" not in r for r in recs if r["kind"] == "step")  # lost, not invented
        assert ("event", "signal") in kinds and kinds[-1] == ("event", "signal")  # order kept
        lost = [r for r in recs if r.get("type") == "warning"]
        assert len(lost) == 1 and lost[0]["readbacks_lost"] == 6 and w.readbacks_lost == 6
        assert recs.index(lost[0]) == 1  # right after the first record that lost its value
    finally:
        w.close()


def test_close_writes_everything_after_stuck_read_backs_exit_last(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    w = _stuck_writer(log, 8)
    w.put({"kind": "event", "type": "exit", "t": 0.0, "status": "ok"})
    w.close(timeout=3.0)
    recs = _all_lines_parse(log)
    assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(8))
    assert recs[-1]["type"] == "exit" and w.readbacks_lost == 8


def test_a_backlog_at_close_is_written_whole_exit_last(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A loop that outran the encoder leaves a backlog that takes longer than close()'s
    wait: the sinks were closed under the writer, and the backlog and the exit record were
    lost without a word. Now close() waits while lines keep coming, says so once, and the
    backlog reaches the log in bounded pieces as it goes."""
    import time

    from dltop.probe import writer as writer_module
    from dltop.probe.filesink import FileSink
    from dltop.probe.writer import Writer

    log = tmp_path / "run.jsonl"
    sink = ListSink()
    w = Writer([FileSink(str(log)), sink], heartbeat=None)
    w.start()

    def slow(item: tuple, force: object) -> dict:  # an encoder slower than the loop
        time.sleep(0.0005)
        return {"kind": "step", "step": item[1], "t": 0.0, "pad": "x" * 2000}

    build = w.register(slow)
    n = 2500  # ~1.3 s of building against a 0.3 s wait, ~5 MB of lines
    for i in range(n):
        w.put((build, i))
    w.put({"kind": "event", "type": "exit", "t": 0.0, "status": "ok"})
    w.close(timeout=0.3)
    recs = _all_lines_parse(log)
    assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(n))
    assert recs[-1]["type"] == "exit" and sink.closed
    assert len(sink.batches) > 2  # written in pieces of about WRITE_CHUNK bytes
    assert max(map(len, sink.batches)) < 2 * writer_module.WRITE_CHUNK
    err = capfd.readouterr().err
    assert err.count("writing the log's last") == 1 and "stuck" not in err
