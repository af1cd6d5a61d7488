"""The live socket, with real sockets: backlog for late viewers, fan-out, stuck and
killed viewers, permissions, tokens for non-loopback TCP, the rendezvous directory."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dltop.probe import rendezvous
from dltop.probe.decoding import LineDecoder
from dltop.probe.encoding import encode_record
from dltop.probe.socket_server import SocketServer
from dltop.probe.viewerauth import is_loopback

META = encode_record({"kind": "meta", "v": 1, "run_id": "r1"})


def _step(i: int) -> bytes:
    return encode_record({"kind": "step", "step": i, "t": 1.0 + i, "loss": 1.0 / (i + 1)})


def _read_records(sock: socket.socket, want: int, timeout: float = 5.0) -> list[dict]:
    """Read until ``want`` records arrived (or the timeout), through the real decoder."""
    dec = LineDecoder()
    out: list[dict] = []
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        out.extend(dec.feed(chunk))
    return out


def _connect_unix(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


@pytest.fixture
def sock_path(tmp_path: Path) -> str:
    # AF_UNIX paths are limited to ~107 bytes; pytest's tmp paths can be long
    d = Path("/tmp") / f"dltop-test-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(mode=0o700)
    yield str(d / "run.sock")
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def test_late_viewer_gets_meta_then_backlog_then_live(sock_path: str) -> None:
    server = SocketServer(sock_path)
    server.start(META)
    try:
        for i in range(50):
            server.write(_step(i))
        time.sleep(0.2)
        viewer = _connect_unix(sock_path)
        recs = _read_records(viewer, 51)
        assert recs[0]["kind"] == "meta"
        assert [r["step"] for r in recs[1:]] == list(range(50))
        server.write(_step(50))
        live = _read_records(viewer, 1)
        assert [r["step"] for r in live] == [50]
        viewer.close()
    finally:
        server.close()
    assert not os.path.exists(sock_path), "the socket file must go on close"


def test_backlog_is_bounded(sock_path: str) -> None:
    server = SocketServer(sock_path, backlog_bytes=2000)
    server.start(META)
    try:
        for i in range(500):
            server.write(_step(i))
        time.sleep(0.2)
        viewer = _connect_unix(sock_path)
        recs = _read_records(viewer, 500, timeout=1.0)
        steps = [r["step"] for r in recs if r["kind"] == "step"]
        assert recs[0]["kind"] == "meta"
        assert 0 < len(steps) < 100, "the backlog keeps only recent records"
        assert steps == list(range(steps[0], 500)), "the backlog is the most recent, in order"
        viewer.close()
    finally:
        server.close()


def test_three_viewers_each_get_everything(sock_path: str) -> None:
    server = SocketServer(sock_path)
    server.start(META)
    try:
        viewers = [_connect_unix(sock_path) for _ in range(3)]
        time.sleep(0.2)
        for i in range(300):
            server.write(_step(i))
        for v in viewers:
            recs = _read_records(v, 301)
            assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(300))
            v.close()
    finally:
        server.close()


@pytest.mark.slow
def test_stuck_viewer_never_blocks_and_is_told_what_it_lost(sock_path: str) -> None:
    server = SocketServer(sock_path, backlog_bytes=256 << 10, client_max_bytes=1 << 20)
    server.start(META)
    try:
        stuck = _connect_unix(sock_path)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        healthy = _connect_unix(sock_path)
        time.sleep(0.2)
        got: list[dict] = []
        reader = threading.Thread(target=lambda: got.extend(_read_records(healthy, 1 + 40000, 30)))
        reader.start()
        payload = b"".join(_step(i) for i in range(100))  # ~5 KB per batch
        for _ in range(400):  # ~2 MB: more than the stuck viewer may buffer (1 MB + kernel)
            server.write(payload)  # only queues: a blocking write would hang this test
            time.sleep(0.01)  # 10 k records/s, a fast training's pace
        reader.join()
        assert sum(r["kind"] == "step" for r in got) == 400 * 100, "a reading viewer loses nothing"
        time.sleep(0.3)
        assert server.total_dropped > 0, "the stuck viewer's overflow is dropped, for it only"
        # the stuck viewer finally reads: its stream ends with the count of what it lost
        recs = _read_records(stuck, 10**9, timeout=3)
        notices = [r for r in recs if r["kind"] == "event" and r.get("type") == "dropped"]
        assert notices and sum(n["records"] for n in notices) == server.total_dropped
        stuck.close()
        healthy.close()
    finally:
        server.close()


def test_viewer_killed_mid_stream_does_not_hurt_the_others(sock_path: str) -> None:
    server = SocketServer(sock_path)
    server.start(META)
    try:
        code = (
            "import socket,sys,time\n"
            "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\n"
            "s.recv(100);print('ready',flush=True);time.sleep(60)\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", code, sock_path], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout.readline().strip() == "ready"
        other = _connect_unix(sock_path)
        for i in range(100):
            server.write(_step(i))
        child.kill()
        child.wait()
        for i in range(100, 200):
            server.write(_step(i))
        recs = _read_records(other, 201)
        assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(200))
        time.sleep(0.2)
        assert server.viewers == 1
        other.close()
    finally:
        server.close()


def test_socket_and_directory_permissions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    d = rendezvous.runtime_dir()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    path = str(rendezvous.socket_path("perm-test"))
    if len(path) > 100:
        pytest.skip("tmp path too long for AF_UNIX")
    server = SocketServer(path)
    server.start(META)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        server.close()


def test_directory_open_to_others_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "dltop").mkdir(mode=0o755)
    os.chmod(tmp_path / "dltop", 0o755)
    with pytest.raises(rendezvous.RendezvousError, match="chmod 700"):
        rendezvous.runtime_dir()


def test_stale_entries_of_dead_processes_are_cleaned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    d = rendezvous.runtime_dir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for run_id, pid in (("dead", dead.pid), ("alive", os.getpid())):
        (d / f"{run_id}.sock").write_bytes(b"")
        rendezvous.register(run_id, {"pid": pid, "host": socket.gethostname(), "started": 1.0}, d)
    runs = rendezvous.list_runs(d)
    assert [r["run_id"] for r in runs] == ["alive"]
    assert not (d / "dead.sock").exists() and not (d / "dead.json").exists()


def test_a_live_socket_is_not_stolen(sock_path: str) -> None:
    first = SocketServer(sock_path)
    first.start(META)
    try:
        with pytest.raises(OSError, match="already serves"):
            SocketServer(sock_path).start(META)
    finally:
        first.close()


def test_loopback_tcp_needs_no_token() -> None:
    server = SocketServer(None, tcp=("127.0.0.1", 0))
    server.start(META)
    try:
        s = socket.create_connection(("127.0.0.1", server.bound_port))
        recs = _read_records(s, 1)
        assert recs[0]["kind"] == "meta"
        s.close()
    finally:
        server.close()


def test_non_loopback_tcp_requires_a_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("")
    with pytest.raises(ValueError, match="without a token"):
        SocketServer(None, tcp=("0.0.0.0", 0))
    # a token is enforced whenever one is given; serving on loopback keeps the test's
    # traffic on this machine (binding a public address is what requires one)
    server = SocketServer(None, tcp=("127.0.0.1", 0), token="s3cret")
    server.start(META)
    try:
        port = server.bound_port
        bad = socket.create_connection(("127.0.0.1", port))
        bad.sendall(json.dumps({"token": "wrong"}).encode() + b"\n")
        recs = _read_records(bad, 1)
        assert recs and recs[0]["type"] == "refused" and "token" in recs[0]["message"]
        assert bad.recv(100) == b"", "a refused viewer is disconnected"
        bad.close()
        good = socket.create_connection(("127.0.0.1", port))
        good.sendall(json.dumps({"token": "s3cret"}).encode() + b"\n")
        recs = _read_records(good, 1)
        assert recs[0]["kind"] == "meta"
        good.close()
    finally:
        server.close()
