"""What `dltop ls` lists and what a bare `dltop` opens, with real sockets, real rendezvous
files, real logs and the real command line: malformed entries and logs never break the
listing; a live run that stopped stepping is ``stalled``; a dead socket is passed over
for the next live run, else the newest log; logs are found at any depth by both."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dltop.probe import rendezvous
from dltop.probe.encoding import encode_record
from dltop.probe.socket_server import SocketServer
from dltop.tui import view_cmd
from dltop.tui.core.sources import discover


@pytest.fixture
def run_dir(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    return rendezvous.runtime_dir()


@pytest.fixture
def servers() -> Iterator[list[SocketServer]]:
    started: list[SocketServer] = []
    yield started
    for s in started:
        s.close()


def serve_run(
    run_dir: Path,
    key: str,
    servers: list[SocketServer],
    records: list[dict],
    started: float | str | None = None,
    log_path: str | None = None,
) -> SocketServer:
    """A real socket at the rendezvous path of ``key``, announced as a run of this process."""
    meta = records[0]
    server = SocketServer(str(rendezvous.socket_path(key, run_dir)))
    server.start(encode_record(meta))
    servers.append(server)
    server.write(b"".join(encode_record(r) for r in records))
    info = {"run_id": meta["run_id"], "pid": os.getpid(), "host": socket.gethostname()}
    info["started"] = meta["t"] if started is None else started
    if log_path is not None:
        info["log_path"] = log_path
    rendezvous.register(key, info, run_dir)
    return server


def run_records(run_id: str, t0: float, steps: int, gap: float = 1.0) -> list[dict]:
    meta = {"kind": "meta", "v": 1, "run_id": run_id, "t": t0, "pid": os.getpid()}
    meta["host"] = socket.gethostname()
    return [meta] + [
        {"kind": "step", "step": i, "t": t0 + 1 + i * gap, "loss": 1.0 / (i + 1)}
        for i in range(steps)
    ]


def dltop(*args: str, cwd: Path, env_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(env_dir), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    return path


# ---- malformed entries and logs -------------------------------------------------------------
def test_ls_survives_malformed_entries_and_logs(
    run_dir: Path, short_dir: Path, tmp_path: Path, servers: list
) -> None:
    now = time.time()
    # a real live run whose entry says "started" as text
    serve_run(run_dir, f"oddstart.{os.getpid()}", servers, run_records("oddstart", now, 5),
              started="yesterday")  # fmt: skip
    # entries no probe writes: a pid that is text, a list, a bool; not an object; not UTF-8
    for name, body in (
        ("textpid.1", json.dumps({"pid": "abc", "started": now}).encode()),
        ("listpid.1", json.dumps({"pid": [1], "started": now}).encode()),
        ("boolpid.1", json.dumps({"pid": True, "started": now}).encode()),
        ("notadict.1", b"[1, 2, 3]"),
        ("binary.1", b"\xff\xfe\x00garbage"),
    ):
        (run_dir / f"{name}.json").write_bytes(body)
        (run_dir / f"{name}.sock").write_bytes(b"")
    logs = tmp_path / "dltop-runs"
    meta = {"kind": "meta", "v": 1, "run_id": {"not": "text"}, "t": "yesterday", "pid": "abc"}
    write_lines(logs / "oddmeta.jsonl", [encode_record(meta), encode_record(
        {"kind": "step", "step": 3, "t": "later"})])  # fmt: skip
    write_lines(logs / "binary.jsonl", [b"\x00\x01\x02\xff\n"])
    write_lines(logs / "empty.jsonl", [])
    good = {"kind": "meta", "v": 1, "run_id": "good", "t": now - 100, "pid": 4242}
    write_lines(logs / "good.jsonl", [encode_record(good), encode_record(
        {"kind": "step", "step": 7, "t": now - 90}), encode_record(
        {"kind": "event", "type": "exit", "status": "ok", "t": now - 80})])  # fmt: skip

    done = dltop("ls", cwd=tmp_path, env_dir=short_dir)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "oddstart" in rows and " - " in rows["oddstart"], done.stdout  # started: '-'
    assert "running" in rows["oddstart"]
    assert "good" in rows and "finished" in rows["good"] and " 7 " in rows["good"]
    assert "oddmeta" in rows, "a log with a malformed meta is listed under its file name"
    assert "binary" not in rows, "a file that is no log is not listed as a run"
    assert "binary.jsonl: not a dltop log" in done.stderr, done.stderr

    done = dltop("ls", "--json", cwd=tmp_path, env_dir=short_dir)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    by_id = {r["run_id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert by_id["oddstart"]["live"] and by_id["oddstart"]["started"] is None
    assert by_id["oddstart"]["step"] == 4
    odd = by_id["oddmeta"]
    assert odd["started"] is None and odd["pid"] is None and odd["live"] is False
    assert [r for r in by_id.values() if r["live"]] == [by_id["oddstart"]]
    assert by_id["good"]["pid"] == 4242 and by_id["good"]["step"] == 7


def test_malformed_rendezvous_entries_are_skipped_not_fatal(run_dir: Path) -> None:
    (run_dir / "bad.1.json").write_text(json.dumps({"pid": "12x", "started": "soon"}))
    (run_dir / "bad.1.sock").write_bytes(b"")
    (run_dir / "me.1.json").write_text(json.dumps({"pid": os.getpid(), "started": "soon"}))
    (run_dir / "me.1.sock").write_bytes(b"")
    runs = rendezvous.list_runs()
    assert [r["key"] for r in runs] == ["me.1"] and runs[0]["started"] is None
    assert (run_dir / "bad.1.json").exists(), "an entry it cannot judge is left alone"


# ---- stalled live runs ----------------------------------------------------------------------
def test_a_live_run_that_stopped_stepping_is_stalled(
    run_dir: Path, short_dir: Path, tmp_path: Path, servers: list
) -> None:
    now = time.time()
    # 100 steps a second apart, then ten minutes of heartbeats only: alive, not stepping
    stuck = run_records("stuck", now - 700, 100)
    stuck += [{"kind": "heartbeat", "t": now - 2 * k, "step": 99, "steps": 100} for k in (2, 1)]
    serve_run(run_dir, f"stuck.{os.getpid()}", servers, stuck)
    # the same pace, stepping right up to now
    serve_run(run_dir, f"busy.{os.getpid()}", servers, run_records("busy", now - 100, 100))

    done = dltop("ls", "--json", cwd=tmp_path, env_dir=short_dir)
    assert done.returncode == 0, done.stderr
    by_id = {r["run_id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert by_id["stuck"]["status"] == "stalled" and by_id["stuck"]["step"] == 99
    assert by_id["busy"]["status"] == "running" and by_id["busy"]["step"] == 99


# ---- bare dltop ----------------------------------------------------------------------------
def dead_socket(path: Path) -> None:
    """A socket file nobody listens on any more (connect: refused)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


def test_bare_dltop_passes_over_a_dead_socket(run_dir: Path, tmp_path: Path, servers: list) -> None:
    now = time.time()
    older = serve_run(run_dir, f"older.{os.getpid()}", servers, run_records("older", now - 50, 3))
    # the newest entry: its process (this one) lives, its socket refuses
    dead_key = f"newest.{os.getpid()}"
    dead_socket(rendezvous.socket_path(dead_key, run_dir))
    info = {"run_id": "newest", "pid": os.getpid(), "host": socket.gethostname(), "started": now}
    rendezvous.register(dead_key, info, run_dir)
    assert [r["run_id"] for r in rendezvous.list_runs()] == ["newest", "older"]

    assert view_cmd.resolve_source(None, cwd=tmp_path) == f"unix:{older.unix_path}"

    older.close()  # now no live run answers: the newest log
    log = write_lines(tmp_path / "dltop-runs" / "last.jsonl", [encode_record(run_records(
        "last", now, 1)[0])])  # fmt: skip
    assert view_cmd.resolve_source(None, cwd=tmp_path) == log
    shutil.rmtree(tmp_path / "dltop-runs")
    with pytest.raises(view_cmd.SourceError, match="no SOURCE given"):
        view_cmd.resolve_source(None, cwd=tmp_path)


def test_bare_dltop_and_ls_find_logs_at_any_depth(
    run_dir: Path, short_dir: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "dltop-runs"
    meta = run_records("x", time.time(), 0)[0]
    top = write_lines(runs / "top.jsonl", [encode_record(meta)])
    nested = write_lines(runs / "exp" / "rank0.jsonl", [encode_record(meta)])
    os.utime(top, (time.time() - 100, time.time() - 100))
    assert discover.recent_logs(runs) == [nested, top]
    assert view_cmd.resolve_source(None, cwd=tmp_path) == nested.parent  # a rank: its job
    done = dltop("ls", "--json", cwd=tmp_path, env_dir=short_dir)
    sources = [json.loads(line)["source"] for line in done.stdout.splitlines()]
    assert sources == ["dltop-runs/exp", "dltop-runs/top.jsonl"], done.stderr


def _rank_log(path: Path, run_id: str, t0: float, steps: int, crash: bool = False) -> Path:
    recs = run_records(run_id, t0, steps)
    lines = [encode_record(r) for r in recs]
    if crash:
        end = {"kind": "event", "type": "exception", "t": t0 + steps + 1, "step": steps - 1,
               "exc_type": "RuntimeError", "message": "boom", "traceback": []}  # fmt: skip
        lines += [encode_record(end), encode_record({"kind": "event", "type": "exit",
                  "status": "exception", "t": t0 + steps + 2})]  # fmt: skip
    else:
        lines.append(encode_record({"kind": "event", "type": "exit", "status": "ok",
                                    "t": t0 + steps + 2}))  # fmt: skip
    return write_lines(path, lines)


def test_ls_shows_a_job_as_one_line_with_its_ranks(
    run_dir: Path, short_dir: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "dltop-runs"
    t0 = time.time() - 300
    for r in range(3):  # rank 1 crashed at step 9; the others finished 20 steps
        _rank_log(runs / "job-7" / f"rank{r}.jsonl", "job-7", t0 + r, 10 if r == 1 else 20, r == 1)
    _rank_log(runs / "solo.jsonl", "solo", t0 - 100, 5)
    os.utime(runs / "solo.jsonl", (t0 - 100, t0 - 100))
    done = dltop("ls", "--json", cwd=tmp_path, env_dir=short_dir)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["source"] for r in rows] == ["dltop-runs/job-7", "dltop-runs/solo.jsonl"]
    job = rows[0]
    assert job["run_id"] == "job-7 (3 ranks)" and job["extra"]["ranks"] == 3
    assert job["status"] == "crashed" and job["step"] == 9  # the worst rank, the slowest step
    text = dltop("ls", cwd=tmp_path, env_dir=short_dir).stdout
    assert sum("job-7" in line for line in text.splitlines()) == 1 and "rank1" not in text


def test_a_live_job_is_one_line_and_bare_dltop_opens_its_folder(
    run_dir: Path, short_dir: Path, tmp_path: Path, servers: list
) -> None:
    now = time.time()
    job = tmp_path / "dltop-runs" / "job-live"
    for r in range(2):
        log = _rank_log(job / f"rank{r}.jsonl", "job-live", now - 5, 3)
        serve_run(run_dir, f"job-live.r{r}.{os.getpid()}", servers,
                  run_records("job-live", now - 5, 3 + r), log_path=str(log))  # fmt: skip
    assert view_cmd.resolve_source(None, cwd=tmp_path) == job
    done = dltop("ls", "--json", cwd=tmp_path, env_dir=short_dir)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 1, rows  # the live job, and its files not again as recent logs
    assert rows[0]["live"] and rows[0]["source"] == str(job) and rows[0]["extra"]["ranks"] == 2


def test_ls_names_its_folder_as_given_and_refuses_a_missing_one(
    short_dir: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "elsewhere"
    good = {"kind": "meta", "v": 1, "run_id": "good", "t": time.time() - 100, "pid": 4242}
    write_lines(logs / "good.jsonl", [encode_record(good)])
    done = dltop("ls", "--dir", str(logs), cwd=tmp_path, env_dir=short_dir)
    assert done.returncode == 0 and f"recent logs in {logs}\n" in done.stdout, done.stdout
    done = dltop("ls", "--dir", "elsewhere", cwd=tmp_path, env_dir=short_dir)
    assert "recent logs in ./elsewhere\n" in done.stdout, done.stdout
    done = dltop("ls", "--dir", str(tmp_path / "missing"), cwd=tmp_path, env_dir=short_dir)
    assert done.returncode == 3 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "no folder" in done.stderr, done.stderr
    done = dltop("ls", "-n", "-1", cwd=tmp_path, env_dir=short_dir)
    assert done.returncode != 0 and "negative" in done.stderr and "Traceback" not in done.stderr


def test_ls_keeps_the_end_of_a_long_run_id_that_tells_runs_apart(
    run_dir: Path, short_dir: Path, tmp_path: Path
) -> None:
    """Two runs named alike up to their timestamp: the list shows both timestamps (it
    cut every id at 27 characters, and the two lines read the same)."""
    runs = tmp_path / "dltop-runs"
    ids = [f"finetune-llama-lora-r16-{stamp}" for stamp in ("20261127-101530", "20261127-114502")]
    for i, run_id in enumerate(ids):
        _rank_log(runs / f"run{i}.jsonl", run_id, time.time() - 50, 5)
    text = dltop("ls", cwd=tmp_path, env_dir=short_dir).stdout
    for run_id in ids:
        assert run_id in text, text  # 39 characters: within the column, whole
    from dltop.tui.ls_cmd import middle_cut

    long = "x" * 60 + "-20261127-101530"
    cut = middle_cut(long, 44)
    assert len(cut) == 44 and cut.endswith("20261127-101530") and "…" in cut
