"""A FIFO, a device, a socket file or a symlink loop given as a log: one line, exit 3, at once.

``dltop check FIFO`` used to block forever in ``open()`` waiting for a writer, ``dltop
check /dev/zero`` read zeros until memory ran out, the viewer never reached its first
frame (``q`` ignored), and a symlink loop was called "no such file". Each case runs the
real command in a subprocess; its timeout only bounds a regression's hang.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.app.app import DltopApp
from dltop.tui.core.files import sourcefiles
from dltop.tui.core.sources.dirsource import DirectorySource
from dltop.tui.core.sources.filesource import FileSource, SourceError, check_log_file
from dltop.tui.core.store.run import RunModel
from test_app_support import write_log


def _dltop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TERM": "dumb", "XDG_RUNTIME_DIR": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    os.mkfifo(path)
    return path


@pytest.fixture
def sock_file(short_dir: Path) -> Iterator[Path]:
    path = short_dir / "run.jsonl"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    yield path
    s.close()


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def _one_line_exit_3(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.parametrize("cmd", [("check",), ()], ids=["check", "viewer"])
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, fifo: Path, cmd: tuple[str, ...]):
    line = _one_line_exit_3(_dltop(*cmd, str(fifo), cwd=tmp_path), "FIFO", "not a log file")
    assert ".jsonl file the probe writes" in line  # the hint


@pytest.mark.parametrize("cmd", [("check",), ()], ids=["check", "viewer"])
def test_dev_zero_is_refused_not_read_forever(tmp_path: Path, cmd: tuple[str, ...]):
    _one_line_exit_3(_dltop(*cmd, "/dev/zero", cwd=tmp_path), "character device")


def test_a_socket_file_is_refused_with_the_unix_hint(short_dir: Path, sock_file: Path):
    line = _one_line_exit_3(_dltop("check", str(sock_file), cwd=short_dir), "socket file")
    assert "unix:PATH" in line


@pytest.mark.parametrize("cmd", [("check",), ()], ids=["check", "viewer"])
def test_a_symlink_loop_is_named_for_what_it_is(tmp_path: Path, loop: Path, cmd: tuple[str, ...]):
    line = _one_line_exit_3(_dltop(*cmd, str(loop), cwd=tmp_path), "symlink loop")
    assert "no such file" not in line


def test_a_fifo_in_a_directory_of_ranks_is_skipped_with_a_note(tmp_path: Path):
    write_log(tmp_path / "rank0.jsonl", "healthy", 20)
    os.mkfifo(tmp_path / "rank1.jsonl")
    done = _dltop("check", str(tmp_path), cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    skipped = [ln for ln in done.stdout.splitlines() if ln.startswith("skipped:")]
    assert len(skipped) == 1 and "rank1.jsonl is a FIFO" in skipped[0]
    # the viewer's directory source lists the good rank and notes the FIFO
    src = DirectorySource(tmp_path, RunModel("t"))
    assert [os.path.basename(f.path) for f in src.files] == ["rank0.jsonl"]
    assert len(src.skipped) == 1 and "rank1.jsonl is a FIFO" in src.skipped[0]


def test_a_directory_holding_only_a_fifo_is_exit_3(tmp_path: Path):
    os.mkfifo(tmp_path / "rank0.jsonl")
    _one_line_exit_3(_dltop("check", str(tmp_path), cwd=tmp_path), "FIFO")


# ------------------------------------------------------------------------ the core


def test_the_core_refuses_special_files(fifo: Path, loop: Path, sock_file: Path):
    for path, needle in (
        (fifo, "FIFO"),
        ("/dev/zero", "character device"),
        (sock_file, "socket file"),
        (loop, "symlink loop"),
    ):
        with pytest.raises(SourceError, match=needle):
            check_log_file(str(path))
        with pytest.raises(SourceError, match=needle):
            FileSource(path, RunModel("t"))


def test_a_fifo_swapped_in_after_the_stat_is_refused_without_blocking(
    fifo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """The race: the path was a regular file when stat'ed and is a FIFO when opened.
    O_NONBLOCK makes the open return at once; the fstat of what was opened refuses it."""
    regular = write_log(tmp_path / "ok.jsonl", "healthy", 3)
    real = os.stat(regular)
    monkeypatch.setattr(sourcefiles, "stat_log", lambda path: real)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(SourceError, match="FIFO"):
        sourcefiles.open_log(str(fifo))
    assert len(os.listdir("/proc/self/fd")) == before  # the descriptor was closed


def test_a_log_replaced_by_a_fifo_while_followed_stops_with_the_error(tmp_path: Path):
    log = write_log(tmp_path / "run.jsonl", "healthy", 5)
    model = RunModel("t")
    src = FileSource(log, model, poll_interval=0.01)
    src._open()
    assert src._read_chunk()
    log.unlink()
    os.mkfifo(log)
    with pytest.raises(SourceError, match="FIFO"):
        src._check_file()  # the path names a new file: it is opened only if regular
    src._close()


def test_a_regular_log_still_opens(tmp_path: Path):
    log = tmp_path / "run.jsonl"
    log.write_bytes(encode_record({"kind": "meta", "v": 1, "t": 0.0}))
    check_log_file(str(log))
    link = tmp_path / "link.jsonl"
    link.symlink_to(log)  # a symlink to a log is fine: only loops and specials are refused
    check_log_file(str(link))


# ------------------------------------------------------------------------ the viewer


async def _viewer_given_a_fifo(fifo: Path) -> None:
    app = DltopApp(str(fifo), follow=True, poll_interval=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.source_error is not None and "FIFO" in app.source_error
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (0, None)


def test_the_viewer_given_a_fifo_shows_the_error_and_quits_on_q(fifo: Path):
    asyncio.run(_viewer_given_a_fifo(fifo))


# ------------------------------------------- the run folder: `dltop ls`, a bare `dltop`


def test_a_folder_holding_only_a_fifo_is_one_line_before_the_viewer_starts(tmp_path: Path):
    """Issue 29 (11): `dltop DIR` checked only that DIR held a `*.jsonl` name, then started
    the full-screen viewer on a FIFO it would never read. Now it is one line, exit 3."""
    job = tmp_path / "job"
    job.mkdir()
    os.mkfifo(job / "rank0.jsonl")
    line = _one_line_exit_3(_dltop(str(job), cwd=tmp_path), "holds no log to read", "FIFO")
    assert ".jsonl file the probe writes" in line


LIST_FIFO = """
import sys
from pathlib import Path
from dltop.tui.core.sources.discover import describe_log
try:
    describe_log(Path(sys.argv[1]))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_ls_never_opens_a_fifo_swapped_in_for_a_log(tmp_path: Path, fifo: Path):
    """The listing saw a regular file; a FIFO took its name before `dltop ls` read it:
    `describe_log` used a blocking open() and waited for a writer forever. Now it is
    opened non-blocking and refused by what it is (the timeout bounds a regression)."""
    done = subprocess.run(
        [sys.executable, "-c", LIST_FIFO, str(fifo)],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.stdout.startswith("SourceError ") and "FIFO" in done.stdout, done


def test_ls_and_a_bare_dltop_pass_over_special_files_in_the_runs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    runs = tmp_path / "dltop-runs"
    (runs / "job").mkdir(parents=True)
    log = write_log(runs / "good.jsonl", "healthy", 20)
    os.mkfifo(runs / "pipe.jsonl")
    os.mkfifo(runs / "job" / "rank1.jsonl")
    (runs / "zero.jsonl").symlink_to("/dev/zero")
    os.utime(log, (1_000, 1_000))  # the oldest: every special file is newer
    done = _dltop("ls", cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "good.jsonl" in done.stdout
    assert "pipe.jsonl" not in done.stdout and "zero.jsonl" not in done.stdout
    from dltop.tui.view_cmd import resolve_source

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no live run of anyone else's
    assert resolve_source(None, cwd=tmp_path) == log  # a bare `dltop` opens the log
