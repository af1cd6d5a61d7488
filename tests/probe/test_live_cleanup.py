"""The live socket leaves nothing behind and fails only in part, with real probes, real
sockets and real processes: a SIGTERM (and an excepthook that hard-exits) removes the
socket and its rendezvous entry; a failed start removes what it bound; the Unix socket
and TCP are separate choices; a dead server thread stops queueing; a very long run id
still gets a socket; an explicit ``$DLTOP_TOKEN`` guards a loopback listener too."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dltop.probe import Probe, rendezvous
from dltop.probe.decoding import LineDecoder, read_records
from dltop.probe.encoding import encode_record
from dltop.probe.socket_server import SocketServer
from dltop.tui.core.sources.socket_source import parse_address, peek
from waiting import wait_for

META = encode_record({"kind": "meta", "v": 1, "run_id": "r1", "t": 1.0})
SECRET = "s3cret-of-20-chars.."


@pytest.fixture
def runtime(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private rendezvous dir (``<short_dir>/dltop``), shared with child processes."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    monkeypatch.delenv("DLTOP_TOKEN", raising=False)
    return short_dir / "dltop"


def entries(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_meta(sock: socket.socket) -> dict:
    dec = LineDecoder()
    sock.settimeout(10)
    while True:
        chunk = sock.recv(65536)
        assert chunk, "closed before the first record"
        recs = dec.feed(chunk)
        if recs:
            return recs[0]


# ---- a death that runs no close ----------------------------------------------------------------
TRAIN = textwrap.dedent(
    """
    import os, sys, time
    from dltop.probe import Probe

    mode, log = sys.argv[1], sys.argv[2]
    if mode == "hard-exit-hook":  # e.g. an MPI launcher's hook that aborts the job
        sys.excepthook = lambda *exc: os._exit(7)
    probe = Probe(path=log, system=False).start()
    for i in range(10):
        probe.step(loss=1.0 / (i + 1))
    probe.flush()
    if mode == "fork":
        if os.fork() == 0:  # a DataLoader-worker-like child: inherits the probe's handlers
            print(os.getpid(), flush=True)  # said by the child: it is past the fork
            time.sleep(60)
            os._exit(0)
        sys.stdin.readline()
        probe.close()
        sys.exit(0)
    print("ready", flush=True)
    if mode == "hard-exit-hook":
        sys.stdin.readline()
        raise RuntimeError("uncaught")
    time.sleep(60)  # the test's SIGTERM ends it
    """
)


def start(mode: str, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", TRAIN, mode, str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_removes_the_socket_and_its_entry(runtime: Path, tmp_path: Path) -> None:
    log = tmp_path / "term.jsonl"
    proc = start("sigterm", log)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        names = entries(runtime)
        assert any(n.endswith(".sock") for n in names) and any(n.endswith(".json") for n in names)
        proc.send_signal(signal.SIGTERM)  # kill -TERM, as a scheduler or `dltop demo` quits it
        assert proc.wait(30) == -signal.SIGTERM, "it still dies by the signal"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert entries(runtime) == [], "no socket and no .json of a dead run"
    records, _ = read_records(str(log))
    assert [r.get("signal") for r in records if r.get("type") == "signal"] == ["SIGTERM"]


def test_an_excepthook_that_hard_exits_leaves_no_entry(runtime: Path, tmp_path: Path) -> None:
    """No atexit, no close: the crash hook removed the entry before passing the exception on."""
    proc = start("hard-exit-hook", tmp_path / "hook.jsonl")
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        assert len([n for n in entries(runtime) if n.endswith(".json")]) == 1
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(30) == 7, "the user's hook still ran"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert entries(runtime) == []


def test_a_forked_child_killed_by_sigterm_leaves_the_parents_entry(
    runtime: Path, tmp_path: Path
) -> None:
    proc = start("fork", tmp_path / "fork.jsonl")
    try:
        child = int(proc.stdout.readline())
        before = entries(runtime)
        assert len(before) == 2
        os.kill(child, signal.SIGTERM)  # the child inherited the handler, not the entry
        assert wait_for(lambda: not Path(f"/proc/{child}").exists() or _zombie(child))
        assert entries(runtime) == before, "a worker's death must not unannounce its parent"
        assert [r["pid"] for r in rendezvous.list_runs()] == [proc.pid]
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert entries(runtime) == []


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---- a failed start ---------------------------------------------------------------------------
def test_a_tcp_port_in_use_fails_the_start_and_leaves_no_unix_socket(short_dir: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    path = short_dir / "run.sock"
    server = SocketServer(str(path), tcp=("127.0.0.1", taken.getsockname()[1]))
    try:
        with pytest.raises(OSError):
            server.start(META)
        assert not path.exists(), "the Unix socket bound before the TCP failure is gone"
        assert server.failed_on == "tcp"
        server.close()  # harmless after a failed start
        again = SocketServer(str(path))  # the path is free for the next try
        again.start(META)
        again.close()
    finally:
        taken.close()


def test_a_failed_start_never_removes_another_runs_socket(short_dir: Path) -> None:
    path = short_dir / "run.sock"
    first = SocketServer(str(path))
    first.start(META)
    try:
        second = SocketServer(str(path))
        with pytest.raises(OSError, match="already serves"):
            second.start(META)
        second.close()
        assert path.exists(), "the live run's socket stays"
        assert peek(parse_address(f"unix:{path}"), timeout=2.0)[0]["run_id"] == "r1"
    finally:
        first.close()


def test_a_probe_whose_tcp_port_is_taken_keeps_its_unix_socket(
    runtime: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with Probe(path=str(tmp_path / "busy.jsonl"), system=False, tcp=f"127.0.0.1:{port}"):
            err = capfd.readouterr().err
            warnings = [line for line in err.splitlines() if "warning" in line]
            assert len(warnings) == 1 and f"tcp://127.0.0.1:{port}" in warnings[0], err
            assert "Unix socket still serves" in warnings[0]
            (run,) = rendezvous.list_runs()
            assert run["tcp"] is None, "the entry does not announce a listener that is not there"
            assert peek(parse_address(f"unix:{run['socket']}"), timeout=2.0)[0]["kind"] == "meta"
    finally:
        taken.close()
    assert entries(runtime) == []


# ---- the Unix socket and TCP are separate choices -------------------------------------------
def _tcp_address(err: str) -> tuple[str, int]:
    m = re.search(r"serving this run on tcp://([^:]+):(\d+)", err)
    assert m, err
    return m.group(1), int(m.group(2))


def test_socket_false_with_tcp_serves_tcp_only(
    runtime: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with Probe(path=str(tmp_path / "tcp.jsonl"), system=False, socket=False, tcp="127.0.0.1:0"):
        host, port = _tcp_address(capfd.readouterr().err)
        assert entries(runtime) == [], "socket=False: no Unix socket, nothing announced"
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(b'{"token": ""}\n')
        assert read_meta(s)["kind"] == "meta"
        s.close()


def test_a_bad_tcp_spec_keeps_the_unix_socket_and_warns_once(
    runtime: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with Probe(path=str(tmp_path / "bad.jsonl"), system=False, tcp="7007") as probe:
        probe.step(loss=1.0)
        probe.flush()
        err = capfd.readouterr().err
        warnings = [line for line in err.splitlines() if line.startswith("dltop: warning")]
        assert len(warnings) == 1, err
        assert "'7007'" in warnings[0] and "HOST:PORT" in warnings[0]
        assert "Unix socket still serves" in warnings[0]
        (run,) = rendezvous.list_runs()
        recs = peek(parse_address(f"unix:{run['socket']}"), timeout=2.0)
        assert [r["step"] for r in recs if r["kind"] == "step"] == [0]
    assert entries(runtime) == []


def test_an_explicit_token_is_enforced_on_loopback_too(
    runtime: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("DLTOP_TOKEN", SECRET)
    with Probe(path=str(tmp_path / "tok.jsonl"), system=False, socket=False, tcp="127.0.0.1:0"):
        host, port = _tcp_address(capfd.readouterr().err)
        bad = socket.create_connection((host, port), timeout=10)
        bad.sendall(b'{"token": "wrong"}\n')
        assert read_meta(bad)["type"] == "refused"
        bad.close()
        good = socket.create_connection((host, port), timeout=10)
        good.sendall(json.dumps({"token": SECRET}).encode() + b"\n")
        assert read_meta(good)["kind"] == "meta"
        good.close()
    monkeypatch.delenv("DLTOP_TOKEN")
    with Probe(path=str(tmp_path / "open.jsonl"), system=False, socket=False, tcp="127.0.0.1:0"):
        host, port = _tcp_address(capfd.readouterr().err)
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(b'{"token": ""}\n')
        assert read_meta(s)["kind"] == "meta", "no token set: loopback needs none"
        s.close()


@pytest.mark.parametrize("unix", [True, False])
def test_a_short_token_is_refused_without_raising(
    runtime: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch, unix: bool
) -> None:
    """A 9-character $DLTOP_TOKEN was served (and 4 of its characters printed): now the
    probe warns once, without the token, and serves no TCP; the training goes on."""
    short = "9chars-ok"
    monkeypatch.setenv("DLTOP_TOKEN", short)
    log = tmp_path / "short.jsonl"
    with Probe(path=str(log), system=False, socket=unix, tcp="127.0.0.1:0") as probe:
        probe.step(loss=1.0)
        probe.flush()
        err = capfd.readouterr().err
        warnings = [line for line in err.splitlines() if line.startswith("dltop: warning")]
        assert len(warnings) == 1 and "too short" in warnings[0], err
        assert "serving this run on tcp://" not in err
        assert short[:2] not in err.replace("dltop", "")  # not even masked
        runs = rendezvous.list_runs()
        assert len(runs) == (1 if unix else 0) and not (runs and runs[0].get("tcp"))
    records, _ = read_records(str(log))
    assert [r["step"] for r in records if r["kind"] == "step"] == [0]


# ---- a dead server thread ---------------------------------------------------------------------
def _break(server: SocketServer) -> None:
    """Make the server thread die at its next wake-up, as an unforeseen bug would."""

    def boom() -> None:
        raise RuntimeError("injected server failure")

    server._drain_wake = boom  # type: ignore[method-assign]


def test_a_dead_server_thread_stops_queueing(short_dir: Path) -> None:
    server = SocketServer(str(short_dir / "run.sock"))
    server.start(META)
    try:
        _break(server)
        server.write(encode_record({"kind": "step", "step": 0, "t": 1.0}))
        assert wait_for(lambda: server.dead)
        assert isinstance(server.error, RuntimeError)
        for i in range(10_000):
            server.write(encode_record({"kind": "step", "step": i, "t": 1.0}))
        assert len(server._queue) == 0, "nothing piles up behind a dead thread"
    finally:
        server.close()


def test_a_probe_drops_a_dead_socket_once_and_keeps_its_log(runtime: Path, tmp_path: Path) -> None:
    log = tmp_path / "dead.jsonl"
    with Probe(path=str(log), system=False) as probe:
        (live,) = [s for s in probe._writer.sinks if type(s).__name__ == "LiveSink"]
        _break(live.server)
        for i in range(200):
            probe.step(loss=1.0 / (i + 1))
            if i % 50 == 0:
                probe.flush()
        probe.flush()
        assert wait_for(lambda: live not in probe._writer.sinks)
        stopped = [w for w in probe.warnings if "live socket server stopped" in w]
        assert len(stopped) == 1, probe.warnings
        assert entries(runtime) == [], "a dead socket is no longer offered to viewers"
    records, _ = read_records(str(log))
    assert [r["step"] for r in records if r["kind"] == "step"] == list(range(200))


# ---- a very long run id -----------------------------------------------------------------------
def test_a_150_char_run_id_gets_a_live_socket(
    runtime: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_id = "exp-" + "x" * 140 + "-long1"
    assert len(run_id) == 150
    with Probe(path=str(tmp_path / f"{run_id}.jsonl"), system=False) as probe:
        probe.step(loss=1.0)
        probe.flush()
        assert "warning" not in capfd.readouterr().err
        (run,) = rendezvous.list_runs()
        assert run["run_id"] == run_id, "the .json keeps the full run id"
        assert len(os.fsencode(run["socket"])) < 108, "the socket path fits AF_UNIX"
        recs = peek(parse_address(f"unix:{run['socket']}"), timeout=2.0)
        assert recs[0]["run_id"] == run_id and [r["step"] for r in recs[1:]] == [0]
        names = entries(runtime)
        assert len(names) == 2 and {Path(n).stem for n in names} == {Path(run["socket"]).stem}
    assert entries(runtime) == []


def test_long_keys_get_distinct_stable_names(short_dir: Path) -> None:
    a, b = "r" * 150 + ".1", "r" * 150 + ".2"
    assert rendezvous.entry_name(a, short_dir) == rendezvous.entry_name(a, short_dir)
    assert rendezvous.entry_name(a, short_dir) != rendezvous.entry_name(b, short_dir)
    assert rendezvous.entry_name("short.1", short_dir) == "short.1"
    for key in (a, "é" * 120):
        assert len(os.fsencode(rendezvous.socket_path(key, short_dir))) <= 100


# ---- special files where the probe reads or writes ----------------------------------------------
FIFO_RUN = """
import sys
from dltop.probe import Probe
with Probe(path=sys.argv[1], system=False) as probe:
    probe.step(loss=1.0)
print("done", flush=True)
"""


def _run_child(*args: str) -> subprocess.CompletedProcess[str]:
    """A child that must finish: a hang in open() fails the test at the timeout."""
    return subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, timeout=30)


def test_a_fifo_named_json_in_the_run_directory_hangs_no_probe(
    runtime: Path, tmp_path: Path
) -> None:
    """Every new probe reads the run directory's ``*.json`` (stale entries are swept); a
    FIFO there blocked its open() for a writer that never came, and Probe() with it."""
    rendezvous.runtime_dir()
    os.mkfifo(runtime / "evil.json")
    done = _run_child(FIFO_RUN, str(tmp_path / "run.jsonl"))
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    assert "warning" not in done.stderr, done.stderr
    assert (runtime / "evil.json").exists(), "skipped, neither read nor removed"
    assert rendezvous.list_runs() == []


def test_a_fifo_at_the_log_path_costs_only_the_log(runtime: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    done = _run_child(FIFO_RUN, str(fifo))
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    assert "FIFO" in done.stderr and "without a log" in done.stderr


REGISTER = """
import os, sys
from pathlib import Path
from dltop.probe import rendezvous
d = Path(sys.argv[1])
name = rendezvous.entry_name("k.1", d)
os.mkfifo(d / f".{name}.json.tmp")
os.mkfifo(d / f"{name}.token")
rendezvous.register("k.1", {"pid": os.getpid()}, d)
token = rendezvous.write_token("k.1", "t" * 20, d)
print("done", token.read_text().strip() == "t" * 20, flush=True)
"""


def test_the_probes_own_files_are_created_afresh_over_a_fifo(runtime: Path) -> None:
    d = rendezvous.runtime_dir()
    done = _run_child(REGISTER, str(d))
    assert done.returncode == 0 and done.stdout.split() == ["done", "True"], done.stderr
