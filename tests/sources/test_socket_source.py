"""The viewer's live source against a real SocketServer: records reach a RunModel, late
viewers get history, restarts reset, reconnects neither duplicate nor lose, a vanished
socket falls back to the log file, and every bad address ends in one line, not a traceback.

The contract checks of issue 6 (three viewers, a viewer killed mid-stream, a stuck viewer,
latency) are in ``test_stream_contract.py``; `dltop ls` on a live run is at the end here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dltop.probe import rendezvous
from dltop.probe.encoding import encode_record
from dltop.probe.socket_server import SocketServer
from dltop.tui import view_cmd
from dltop.tui.core.sources import socket_source
from dltop.tui.core.sources.socket_source import SocketSource, StreamError, parse_address, peek
from dltop.tui.core.store.run import RunModel
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


# ---- helpers ------------------------------------------------------------------------------
def meta(run_id: str, **kw: object) -> bytes:
    rec = {"kind": "meta", "v": 1, "run_id": run_id, "t": time.time(), "host": "elsewhere"}
    return encode_record({**rec, **kw})


def step(i: int, t: float | None = None) -> bytes:
    t = time.time() if t is None else t
    return encode_record({"kind": "step", "step": i, "t": t, "loss": 1.0 / (i + 1)})


def steps_of(model: RunModel) -> list[int]:
    with model.lock:
        return list(model.store.step_x)


@pytest.fixture
def stack() -> Iterator[list]:
    """Everything a test starts (servers, sources, proxies), stopped at the end."""
    started: list = []
    yield started
    for thing in reversed(started):
        (thing.stop if hasattr(thing, "stop") else thing.close)()


def serve(path: Path | str, run_id: str, stack: list, **kw: object) -> SocketServer:
    server = SocketServer(str(path), **kw)
    server.start(meta(run_id))
    stack.append(server)
    return server


def follow(spec: str, stack: list, **kw: object) -> tuple[SocketSource, RunModel]:
    model = RunModel("live")
    source = SocketSource(spec, model, poll_interval=0.05, **kw).start()
    stack.append(source)
    return source, model


class Proxy:
    """A Unix-socket forwarder, like ``ssh -L``: its connections can be cut while the run
    goes on, which is how a same-run reconnect happens in real life."""

    def __init__(self, upstream: str, path: str) -> None:
        self.upstream = upstream
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(4)
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.upstream)
            except OSError:  # like ssh: the far end refused, so close the near end
                down.close()
                up.close()
                continue
            self.pairs.append((down, up))
            for a, b in ((up, down), (down, up)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        for pair in self.pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.pairs = []

    def close(self) -> None:
        self.cut()
        try:  # wakes the accept() of its thread (close alone would leave it blocked)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()


# ---- records, history, restarts, reconnects ------------------------------------------------
def test_live_records_arrive_in_the_model(short_dir: Path, stack: list) -> None:
    server = serve(short_dir / "r.sock", "r1", stack)
    source, model = follow(f"unix:{short_dir / 'r.sock'}", stack)
    assert wait_for(source.connected.is_set)
    for i in range(100):
        server.write(step(i))
    assert wait_for(lambda: len(steps_of(model)) == 100), steps_of(model)[-3:]
    assert steps_of(model) == list(range(100))
    assert model.meta["run_id"] == "r1" and source.error is None
    with model.lock:
        assert model.store.latest("loss") == pytest.approx(1.0 / 100)


def test_a_late_viewer_gets_meta_and_the_backlog_then_live(short_dir: Path, stack: list) -> None:
    server = serve(short_dir / "r.sock", "r1", stack)
    server.write(b"".join(step(i) for i in range(50)))
    source, model = follow(f"unix:{short_dir / 'r.sock'}", stack)
    assert source.wait_caught_up(10)
    assert wait_for(lambda: len(steps_of(model)) == 50)
    assert model.meta["run_id"] == "r1"
    server.write(step(50))
    assert wait_for(lambda: len(steps_of(model)) == 51)
    assert steps_of(model) == list(range(51))


def test_records_out_of_time_order_are_all_kept(short_dir: Path, stack: list) -> None:
    """The sampler thread stamps a ``sys`` record before a step queued ahead of it."""
    server = serve(short_dir / "r.sock", "r1", stack)
    source, model = follow(f"unix:{short_dir / 'r.sock'}", stack)
    assert wait_for(source.connected.is_set)
    t0 = time.time()
    for i in range(10):
        server.write(step(i, t0 + i) + encode_record({"kind": "sys", "t": t0 + i - 0.5, "rss": i}))
    assert wait_for(lambda: model.store.kinds["sys"] == 10), dict(model.store.kinds)
    assert steps_of(model) == list(range(10))


@pytest.mark.parametrize("second_id", ["r2", "r1"])  # r1: the same script and log path again
def test_a_new_run_at_the_same_address_resets_the_model(
    second_id: str, short_dir: Path, stack: list
) -> None:
    path = short_dir / "r.sock"
    first = serve(path, "r1", stack)
    source, model = follow(f"unix:{path}", stack, fallback_to_file=False)
    assert wait_for(source.connected.is_set)
    first.write(b"".join(step(i) for i in range(10)))
    assert wait_for(lambda: len(steps_of(model)) == 10)
    first.close()
    second = SocketServer(str(path))
    second.start(meta(second_id, pid=os.getpid() + 1))  # another process
    stack.append(second)
    second.write(b"".join(step(i) for i in range(5)))
    assert wait_for(lambda: model.resets == 1)
    assert wait_for(lambda: len(steps_of(model)) == 5)
    assert model.meta["run_id"] == second_id and model.meta["pid"] == os.getpid() + 1
    assert steps_of(model) == list(range(5)), "the old run's records are gone"
    assert model.resets == 1 and model.restarted and "new run" in model.reset_reason
    # >= 2: a reconnect may first reach the closing server (accepted, then dropped) before
    # the new one binds the path; one reset either way (asserted above)
    assert source.connections >= 2 and source.error is None


def test_a_reconnect_to_the_same_run_neither_duplicates_nor_loses(
    short_dir: Path, stack: list
) -> None:
    server = serve(short_dir / "r.sock", "r1", stack)
    proxy = Proxy(str(short_dir / "r.sock"), str(short_dir / "fwd.sock"))
    stack.append(proxy)
    source, model = follow(f"unix:{short_dir / 'fwd.sock'}", stack, fallback_to_file=False)
    t0 = time.time()

    def burst(lo: int, hi: int) -> None:  # steps plus sys records stamped a bit earlier
        for i in range(lo, hi):
            sys_rec = encode_record({"kind": "sys", "t": t0 + i - 0.5, "rss": i})
            server.write(step(i, t0 + i) + sys_rec)

    burst(0, 50)
    assert wait_for(lambda: len(steps_of(model)) == 50)
    proxy.cut()  # the forwarded connection drops; the run goes on
    burst(50, 100)
    assert wait_for(lambda: source.connections >= 2)
    burst(100, 120)
    assert wait_for(lambda: len(steps_of(model)) >= 120)
    time.sleep(0.2)  # a duplicate would arrive with the same batch: let it come if it does
    assert steps_of(model) == list(range(120))
    assert model.store.kinds["sys"] == 120 and model.resets == 0


def test_socket_gone_follows_the_log_file_with_full_history(
    short_dir: Path, tmp_path: Path, stack: list
) -> None:
    log = tmp_path / "run.jsonl"
    head = meta("r1", host=socket.gethostname(), pid=os.getpid(), log_path=str(log))
    lines = [step(i) for i in range(200)]
    log.write_bytes(head + b"".join(lines))
    server = SocketServer(str(short_dir / "r.sock"), backlog_bytes=2000)  # ~30 records
    server.start(head)
    stack.append(server)
    for line in lines:
        server.write(line)
    # connect once the server holds every batch and has cut its backlog to the bound: a
    # viewer connected before that (a busy machine) is sent the rest live, as it should be
    shared = server._log
    assert wait_for(lambda: not server._queue and 0 < shared.end - shared.backlog_start < 200)
    source, model = follow(f"unix:{short_dir / 'r.sock'}", stack)
    assert source.wait_caught_up(10)
    assert wait_for(lambda: len(steps_of(model)) > 0)
    assert len(steps_of(model)) < 200, "the socket's backlog is bounded"
    server.close()
    assert wait_for(lambda: source.file_source is not None)
    assert wait_for(lambda: len(steps_of(model)) == 200)
    assert steps_of(model) == list(range(200))
    assert not model.restarted, "the same run with fuller history is not a restart"
    assert model.resets == 0, "nor counted as one (the header said 'restarted x1')"
    from dltop.tui.core.present import view_model as vm

    info = vm.header_info(model, time.time(), vm.ViewState(), follow=True)
    assert "restarted" not in info.mode
    with open(log, "ab") as f:  # and the file is followed from here on
        f.write(step(200))
    assert wait_for(lambda: len(steps_of(model)) == 201)


@pytest.mark.parametrize("log_path", [["/tmp/run.jsonl"], 7, {"p": 1}])
def test_a_log_path_that_is_not_text_is_not_followed(
    log_path: object, short_dir: Path, stack: list
) -> None:
    """The meta comes from whoever holds the socket: a ``log_path`` that is a list, a
    number (a file descriptor to ``os.path.isfile``) or an object is no file to fall back
    to. The source keeps trying the socket instead of dying on a TypeError."""
    seen: list[BaseException] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_value)  # type: ignore[assignment]
    try:
        head = meta("r1", host=socket.gethostname(), log_path=log_path)
        server = SocketServer(str(short_dir / "odd.sock"))
        server.start(head)
        stack.append(server)
        server.write(step(0))
        source, model = follow(f"unix:{short_dir / 'odd.sock'}", stack)
        assert wait_for(lambda: len(steps_of(model)) == 1)
        server.close()
        thread = source._thread
        assert thread is not None
        # the socket is gone: the source looks for a file at once, then retries with
        # backoff. The old code died here; give it ample time to, on a busy machine too
        assert wait_for(lambda: not source.connected.is_set())
        assert not wait_for(lambda: bool(seen) or not thread.is_alive(), timeout=2.0)
        assert source.file_source is None
    finally:
        threading.excepthook = old_hook


def test_a_forward_whose_far_end_is_gone_is_retried_with_backoff(
    short_dir: Path, stack: list
) -> None:
    """``ssh -L`` keeps listening when the run behind it is gone: it accepts, then closes."""
    server = serve(short_dir / "r.sock", "r1", stack)
    proxy = Proxy(str(short_dir / "r.sock"), str(short_dir / "fwd.sock"))
    stack.append(proxy)
    source, model = follow(f"unix:{short_dir / 'fwd.sock'}", stack, fallback_to_file=False)
    server.write(step(0))
    assert wait_for(lambda: steps_of(model) == [0])
    server.close()  # the far end is gone; the forward still accepts and closes at once
    proxy.upstream = str(short_dir / "gone.sock")
    proxy.cut()
    assert wait_for(lambda: source.connections >= 2)
    start = source.connections
    time.sleep(1.0)  # backoff 0.1 + 0.2 + 0.4 + 0.8 s: at most 4 more tries fit in here
    assert source.connections - start <= 5, "reconnects must back off, not spin"
    assert source.error is None and source.alive, "and it keeps trying"


# ---- bad addresses: one line, no traceback ----------------------------------------------------
def test_a_wrong_token_is_refused_with_one_line(stack: list) -> None:
    server = SocketServer(None, tcp=("127.0.0.1", 0), token="s3cret")
    server.start(meta("r1"))
    stack.append(server)
    server.write(step(0))
    port = server.bound_port
    source, model = follow(f"tcp://127.0.0.1:{port}?token=wrong", stack)
    assert wait_for(lambda: not source.alive)
    assert source.error and "\n" not in source.error
    assert "refused" in source.error and "token" in source.error
    assert model.source_error == source.error and source.connections == 1
    assert steps_of(model) == [], "nothing from a refused connection reaches the model"
    with pytest.raises(StreamError, match="refused"):
        peek(parse_address(f"tcp://127.0.0.1:{port}"))
    good, model2 = follow(f"tcp://127.0.0.1:{port}?token=s3cret", stack)
    assert wait_for(lambda: steps_of(model2) == [0]) and good.error is None


def test_the_token_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_TOKEN", "from-env")
    assert parse_address("tcp://127.0.0.1:7007").token == "from-env"
    assert parse_address("tcp://127.0.0.1:7007?token=given").token == "given"


@pytest.mark.parametrize(
    "spec, words",
    [("unix:/tmp/dltop-no-such-{pid}.sock", "no such socket"), ("tcp://127.0.0.1:{port}", "")],
)
def test_a_dead_address_at_start_is_an_error_without_traceback(
    spec: str, words: str, stack: list, capfd: pytest.CaptureFixture[str]
) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nobody listens on
    source, model = follow(spec.format(pid=os.getpid(), port=port), stack)
    assert wait_for(lambda: not source.alive)
    assert source.error and "\n" not in source.error and words in source.error
    assert "dltop ls" in source.error, "the message says where to look"
    assert model.source_error == source.error
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "spec",
    ["unix:", "tcp://nohost", "tcp://h:notaport", "http://x", "tcp://[::1", "tcp://[::1]:99999"],
)
def test_malformed_addresses_raise_one_line_hints(spec: str) -> None:
    with pytest.raises(StreamError) as err:
        parse_address(spec)
    assert "\n" not in str(err.value) and ("use" in str(err.value) or "unix:" in str(err.value))


def test_peek_returns_meta_and_backlog_without_waiting_for_live(
    short_dir: Path, stack: list
) -> None:
    server = serve(short_dir / "r.sock", "r1", stack)
    server.write(b"".join(step(i) for i in range(20)))
    stop = threading.Event()

    def keep_training() -> None:  # live records keep coming: peek must still return
        i = 20
        while not stop.wait(0.005):
            server.write(step(i))
            i += 1

    t = threading.Thread(target=keep_training, daemon=True)
    t.start()
    try:
        time.sleep(0.1)  # live records already flowing when the viewer connects
        recs = peek(parse_address(f"unix:{short_dir / 'r.sock'}"), timeout=30.0)
    finally:
        stop.set()
        t.join()
    assert recs[0]["kind"] == "meta" and recs[0]["run_id"] == "r1"
    steps = [r["step"] for r in recs if r["kind"] == "step"]
    assert steps[:20] == list(range(20))
    # it stopped at the live stream, not at the timeout: a record every 5 ms for 30 s
    # would be ~6000 steps; a busy machine may let a few hundred through, never thousands
    assert len(steps) < 2000, f"read {len(steps)} steps: peek waited for the timeout"
    with pytest.raises(StreamError, match="no such socket"):
        peek(parse_address(f"unix:{short_dir / 'gone.sock'}"))


def test_peek_reads_the_whole_backlog_from_a_clock_it_does_not_share(
    stack: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TCP from another host the run's clock is not ours: records stamped an hour
    ahead are still backlog, and peek reads all of it (a pause ends the read, as before).
    The host is made "remote" by telling peek its loopback address is not one."""
    server = SocketServer(None, tcp=("127.0.0.1", 0))
    server.start(meta("far"))
    stack.append(server)
    port = server.bound_port
    ahead = time.time() + 3600
    server.write(b"".join(step(i, t=ahead + i) for i in range(20_000)))  # ~1.4 MB: many reads
    monkeypatch.setattr(socket_source, "is_loopback", lambda host: False)
    recs = peek(parse_address(f"tcp://127.0.0.1:{port}"), timeout=30.0)
    assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(20_000))


# ---- dltop ls and bare dltop on a live run ----------------------------------------------------
LIVE_RUN = textwrap.dedent(
    """
    import sys, time
    from dltop.probe import Probe

    with Probe(path=sys.argv[1], system=False) as probe:
        for i in range(6000):  # bounded: a minute at most; the test kills it long before
            probe.step(loss=1.0 / (i + 1))
            if i == 20:
                print("ready", flush=True)
            time.sleep(0.01)
    """
)


def _ls(env: dict[str, str], cwd: Path) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "ls", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_dltop_ls_shows_a_live_run_and_cleans_a_killed_one(
    short_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(short_dir)}
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    log = tmp_path / "live-1.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", LIVE_RUN, str(log)], env=env, stdout=subprocess.PIPE, text=True
    )
    run_dir = short_dir / "dltop"
    try:
        assert child.stdout.readline().strip() == "ready"
        rows = [r for r in _ls(env, tmp_path) if r["live"]]
        assert len(rows) == 1, rows
        row = rows[0]
        assert row["run_id"] == "live-1" and row["pid"] == child.pid
        assert row["status"] == "running" and row["step"] >= 20
        assert row["log_path"] == str(log)
        sock = run_dir / f"live-1.{child.pid}.sock"
        assert row["source"] == f"unix:{sock}"
        bare = view_cmd.resolve_source(None, cwd=tmp_path)
        assert bare == row["source"], "bare dltop attaches"
        later = [r for r in _ls(env, tmp_path) if r["live"]]
        assert later[0]["step"] > row["step"], "the step is the run's latest, live"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert sock.exists(), "SIGKILL leaves the socket behind"
    assert [r for r in _ls(env, tmp_path) if r["live"]] == []
    assert not sock.exists() and not sock.with_suffix(".json").exists(), "stale entry cleaned"
    assert rendezvous.list_runs() == []
