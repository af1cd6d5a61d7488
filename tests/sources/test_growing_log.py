"""`dltop check` and `dltop report` on a log that is still being written always end.

Issue 29 (4): both read until ``read()`` returned nothing, which never happens while a run
appends faster than they read: killed at 30, 60 and 120 s with the file at 1–2.4 GB, a CI
step checking a live run hung. Now they read the log as it was when they opened it and
say what came after; ``--follow SECONDS`` reads on until the run's exit record, its
process gone, or the limit.

The writer is a real process. To outrun any reader without filling the disk, its "flood"
mode appends a few steps and then a 256 MiB hole (``ftruncate``: a sparse file) every
10 ms; its "steady" mode appends steps for a few seconds, then its exit record. Each
command runs in a subprocess under a timeout that only bounds a regression's hang.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from waiting import wait_for

WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    path, mode, secs, head = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    t0 = time.time()
    def steps(a, b):
        return "".join(
            f'{{"kind":"step","step":{i},"t":{t0 + i * 0.01},"loss":{1.0 / (i + 1)}}}\\n'
            for i in range(a, b)
        ).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    meta = {"kind": "meta", "v": 1, "run_id": "growing", "t": t0, "pid": os.getpid(),
            "host": os.uname().nodename}
    os.write(fd, (json.dumps(meta) + "\\n").encode())
    for a in range(0, head, 10000):
        os.write(fd, steps(a, min(head, a + 10000)))
    print("ready", flush=True)
    sys.stdin.readline()
    i, end = head, time.monotonic() + secs
    while time.monotonic() < end:
        os.write(fd, steps(i, i + 10))
        i += 10
        if mode == "flood":
            os.ftruncate(fd, os.fstat(fd).st_size + (256 << 20))
        time.sleep(0.01)
    exit_rec = {"kind": "event", "type": "exit", "t": time.time(), "status": "ok"}
    os.write(fd, (json.dumps(exit_rec) + "\\n").encode())
    os.close(fd)
    """
)


def _holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it has read its size by then, or is
    about to: the writer waits for this before it grows the file)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


@contextmanager
def _growing(path: Path, mode: str, seconds: float, head: int) -> Iterator[subprocess.Popen[str]]:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), mode, str(seconds), str(head)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        yield writer
    finally:
        writer.kill()
        writer.wait()
        path.unlink(missing_ok=True)  # sparse, but its apparent size is hundreds of GB


def _run_while_growing(
    path: Path, mode: str, seconds: float, head: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``dltop ARGS path`` started on the log, the writer told to go once it has the log
    open; returns its result and how long it took."""
    with _growing(path, mode, seconds, head) as writer:
        t = time.monotonic()
        cmd = subprocess.Popen(
            [sys.executable, "-m", "dltop.tui", *args, str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert wait_for(lambda: _holds_open(cmd.pid, path) or cmd.poll() is not None, 30)
            assert writer.stdin is not None
            writer.stdin.write("go\n")
            writer.stdin.flush()
            out, err = cmd.communicate(timeout=40)  # before: never (killed here)
        finally:
            cmd.kill()
        return subprocess.CompletedProcess(cmd.args, cmd.returncode, out, err), (
            time.monotonic() - t
        )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["check", "report"])
def test_a_log_growing_faster_than_we_read_is_read_as_it_was_and_said(
    tmp_path: Path, command: str
) -> None:
    """200 000 steps are there when the command opens the log; then it grows by GBs a
    second. The command reads what was there, ends, and says the log went on growing."""
    log = tmp_path / "live.jsonl"
    done, _ = _run_while_growing(log, "flood", 60, 200_000, command)
    assert done.returncode in (0, 1, 2) if command == "check" else done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if command == "check":
        text = done.stdout
        assert "steps:   200000" in text  # every step there at the start, none after
    else:
        text = Path(done.stdout.strip()).read_text()
    assert "the log is still growing: read as it was when the check began" in text
    assert "--follow SECONDS reads on" in text  # the hint


def test_follow_stops_at_its_limit_on_a_run_that_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "live.jsonl"
    done, took = _run_while_growing(log, "flood", 60, 1000, "check", "--follow", "2", "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "running"
    (note,) = out["notes"]
    # the limit counts from the command's start: on a busy machine the start itself can
    # take most of 2 s, so the seconds spent following are at most 2, not exactly 2
    followed = re.search(r"followed for (\d+) s and stopped at its --follow limit", note)
    assert followed and int(followed.group(1)) <= 2, note
    assert took < 20  # 2 s of following, the start of the interpreter and the rest


def test_follow_reads_on_to_the_exit_record(tmp_path: Path) -> None:
    """A run that appends for 3 s, then exits: `check --follow 60` has every step and the
    exit record, says finished, and ends with the run, not at its limit."""
    log = tmp_path / "live.jsonl"
    done, took = _run_while_growing(log, "steady", 3, 1000, "check", "--follow", "60", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "finished" and out["steps"] > 1000
    assert "notes" not in out  # nothing left unread
    assert took < 30


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "nan", "1e9"])
def test_follow_takes_a_bounded_number_of_seconds(tmp_path: Path, bad: str) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text('{"kind":"meta","v":1}\n')
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", "--follow", bad, str(log)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "--follow" in done.stderr
    assert "seconds" in done.stderr  # what it takes, not "unrecognized arguments"
