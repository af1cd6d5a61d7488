"""Crash capture (dltop.probe.crash), driven directly: events into a list, a recording flush.

Then end to end: the real Probe in a real tiny training (tests/crash_scripts/tiny_train.py)
in a subprocess, ended by an exception, an uncaught exception, SIGTERM, SIGINT, a CPU
OOM under a self-imposed RLIMIT_AS, and SIGKILL; the log is read back with the schema's
reader.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from dltop.probe.crash import (
    MESSAGE_CHARS,
    RECORDED_SIGNALS,
    TRACEBACK_CHARS,
    TRACEBACK_FRAMES,
    CrashRecorder,
    is_oom,
    qualified_name,
)
from dltop.probe.decoding import decode_line, read_records
from dltop.probe.encoding import encode_record
from dltop.probe.schema import EV_EXCEPTION, EV_OOM, EV_SIGNAL, EVENT
from dltop.tui.core.rules.ending import Ending, event_ending


class Sink:
    def __init__(self, step: int | None = 41) -> None:
        self.calls: list[Any] = []
        self.step = step

    def emit(self, rec: dict[str, Any]) -> None:
        self.calls.append(rec)

    def flush(self, fsync: bool) -> None:
        self.calls.append(("flush", fsync))

    @property
    def events(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if isinstance(c, dict)]

    def recorder(self) -> CrashRecorder:
        return CrashRecorder(self.emit, self.flush, lambda: self.step)


def _ours(stderr: str) -> str:
    """stderr without third-party warnings (e.g. torch's "Failed to initialize NumPy"
    where numpy is absent): a warning line and its indented source line."""
    out, skip = [], False
    for line in stderr.splitlines(keepends=True):
        if "Warning: " in line and not line.startswith((" ", "Traceback")):
            skip = True
            continue
        if skip and line.startswith("  "):
            skip = False
            continue
        skip = False
        out.append(line)
    return "".join(out)


def _raise(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as e:
        return e


def _nested(depth: int) -> None:
    if depth == 0:
        raise ValueError("deep")
    _nested(depth - 1)


def test_exception_event_has_type_message_step_and_traceback_then_flushes() -> None:
    sink = Sink()
    exc = _raise(ValueError("bad shape (3, 4)"))
    sink.recorder().record(exc)
    (ev,) = sink.events
    assert sink.calls[-1] == ("flush", True)  # written and fsynced after the event
    assert ev["kind"] == EVENT and ev["type"] == EV_EXCEPTION
    assert ev["exc_type"] == "ValueError" and ev["message"] == "bad shape (3, 4)"
    assert ev["step"] == 41 and isinstance(ev["t"], float)
    last = ev["traceback"][-1]
    assert last["func"] == "_raise" and last["file"] == __file__
    assert last["code"] == "raise exc" and isinstance(last["line"], int)
    caller = ev["traceback"][-2]  # the live callers come first, like Python prints them
    assert caller["func"] == "test_exception_event_has_type_message_step_and_traceback_then_flushes"
    assert "memory" not in ev
    assert decode_line(encode_record(ev)) == ev  # the record survives the log format


def test_same_exception_is_recorded_once() -> None:
    sink = Sink()
    rec = sink.recorder()
    exc = _raise(RuntimeError("x"))
    rec.record(exc)
    rec.record(exc)  # the with-exit and the excepthook both see it
    rec.record(_raise(RuntimeError("x")))  # an equal but different exception is new
    assert len(sink.events) == 2


def test_traceback_and_message_are_bounded_keeping_the_innermost_frames() -> None:
    sink = Sink()
    try:
        _nested(200)
    except ValueError as e:
        sink.recorder().record(e)
    (ev,) = sink.events
    frames = ev["traceback"]
    assert len(frames) == TRACEBACK_FRAMES
    # 201 _nested frames, the test and pytest's frames under it: only the innermost kept
    assert ev["traceback_omitted"] > 201 - TRACEBACK_FRAMES
    assert {f["func"] for f in frames} == {"_nested"}
    assert frames[-1]["code"] == 'raise ValueError("deep")'
    assert len(encode_record({"t": frames})) < TRACEBACK_CHARS + 2048

    sink = Sink()
    sink.recorder().record(_raise(ValueError("x" * 100_000)))
    msg = sink.events[0]["message"]
    assert len(msg) <= MESSAGE_CHARS and msg.startswith("xxx") and "chars cut" in msg


def test_huge_frames_are_cut_to_the_byte_budget() -> None:
    code = "def f():\n    raise KeyError('k')\n"
    names: dict[str, Any] = {}
    exec(compile(code, "/very/long/" + "d" * 5000 + "/file.py", "exec"), names)
    sink = Sink()
    try:
        names["f"]()
    except KeyError as e:
        sink.recorder().record(e)
    frames = sink.events[0]["traceback"]
    assert frames[-1]["file"].endswith("/file.py") and len(frames[-1]["file"]) <= 300


def test_keyboard_interrupt_is_marked_interrupted_not_crashed() -> None:
    sink = Sink()
    sink.recorder().record(_raise(KeyboardInterrupt()))
    (ev,) = sink.events
    assert ev["type"] == EV_EXCEPTION and ev["exc_type"] == "KeyboardInterrupt"
    assert ev["interrupted"] is True


def test_system_exit_carries_its_code() -> None:
    sink = Sink()
    sink.recorder().record(_raise(SystemExit(3)))
    assert sink.events[0]["exit_code"] == 3


def test_cause_of_a_chained_exception_is_kept() -> None:
    sink = Sink()
    try:
        try:
            raise OSError("disk gone")
        except OSError as inner:
            raise RuntimeError("checkpoint failed") from inner
    except RuntimeError as e:
        sink.recorder().record(e)
    assert sink.events[0]["cause"] == {"exc_type": "OSError", "message": "disk gone"}


def test_qualified_names() -> None:
    assert qualified_name(torch.OutOfMemoryError) == "torch.OutOfMemoryError"
    assert qualified_name(ValueError) == "ValueError"
    assert qualified_name(KeyboardInterrupt) == "KeyboardInterrupt"


CUDA_MSG = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB "
    "of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.6 GiB in use."
)


def test_torch_out_of_memory_error_is_oom_with_requested_size() -> None:
    sink = Sink()
    sink.recorder().record(_raise(torch.OutOfMemoryError(CUDA_MSG)))
    (ev,) = sink.events
    assert ev["type"] == EV_OOM and ev["exc_type"] == "torch.OutOfMemoryError"
    mem = ev["memory"]
    assert mem["device"] == "cuda" and mem["requested"] == 2 << 30
    assert mem["rss"] > 0  # process state is there either way
    if not torch.cuda.is_initialized():
        assert "allocated" not in mem  # no CUDA here: absent, not zero


def test_subclass_of_torch_oom_found_through_the_mro() -> None:
    class MyOom(torch.OutOfMemoryError):
        pass

    assert is_oom(MyOom("x"))


def test_cpu_allocator_failure_is_oom_with_rlimit_and_requested_bytes() -> None:
    msg = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"
    )
    sink = Sink()
    sink.recorder().record(_raise(RuntimeError(msg)))
    ev = sink.events[0]
    assert ev["type"] == EV_OOM and ev["exc_type"] == "RuntimeError"
    mem = ev["memory"]
    assert mem["device"] == "cpu" and mem["requested"] == 8589934592
    assert mem["rss"] > 0 and mem["vms"] >= mem["rss"]
    assert 0 < mem["mem_available"] <= mem["mem_total"]


def test_memory_error_is_oom_and_plain_runtime_error_is_not() -> None:
    assert is_oom(MemoryError())
    assert not is_oom(RuntimeError("shape mismatch"))
    assert not is_oom(ValueError("can't allocate memory"))  # only the allocator's RuntimeError


def test_recording_never_raises() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    def boom(*_: Any) -> Any:
        raise OSError("disk full")

    broken = CrashRecorder(boom, boom, boom)
    broken.record(_raise(ValueError("x")))  # emit, flush and last_step all fail
    sink = Sink()
    CrashRecorder(sink.emit, sink.flush, boom).record(_raise(Unprintable()))
    (ev,) = sink.events
    assert ev["message"] == "<unprintable exception>" and ev["step"] is None


class Hooks:
    """Saves and restores the process-wide hooks a test changes."""

    def __enter__(self) -> Hooks:
        self.hook = sys.excepthook
        self.handlers = {s: signal.getsignal(s) for s in RECORDED_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        sys.excepthook = self.hook
        for s, h in self.handlers.items():
            signal.signal(s, h)


def test_excepthook_records_then_calls_the_previous_hook() -> None:
    seen: list[BaseException] = []
    with Hooks():
        sys.excepthook = lambda t, e, tb: seen.append(e)
        sink = Sink()
        rec = sink.recorder()
        rec.install()
        exc = _raise(ZeroDivisionError("division by zero"))
        sys.excepthook(type(exc), exc, exc.__traceback__)
        assert seen == [exc]
        assert sink.events[0]["exc_type"] == "ZeroDivisionError"
        rec.install()  # a second install must not chain us onto ourselves
        sys.excepthook(type(exc), exc, exc.__traceback__)
        assert seen == [exc, exc] and len(sink.events) == 1
        ours = sys.excepthook
        rec.uninstall()
        assert sys.excepthook is not ours
        sys.excepthook(type(exc), exc, None)
        assert len(seen) == 3 and len(sink.events) == 1


def test_uninstall_leaves_hooks_that_others_set_later() -> None:
    with Hooks() as before:
        rec = Sink().recorder()
        rec.install()

        def theirs(*_: Any) -> None:
            pass

        sys.excepthook = theirs
        signal.signal(signal.SIGTERM, theirs)
        rec.uninstall()
        assert sys.excepthook is theirs
        assert signal.getsignal(signal.SIGTERM) is theirs
        # SIGINT, which nobody set after us, goes back to what it was before the install
        # (not necessarily Python's default: another test or a host may have set one)
        assert signal.getsignal(signal.SIGINT) is before.handlers[signal.SIGINT]


def test_a_stale_chained_handler_passes_through_after_uninstall() -> None:
    got: list[str] = []
    with Hooks():
        signal.signal(signal.SIGTERM, lambda s, f: got.append("original"))
        sink = Sink()
        rec = sink.recorder()
        rec.install()
        ours = signal.getsignal(signal.SIGTERM)

        def later(signum: int, frame: Any) -> None:  # a framework that chains onto us
            got.append("later")
            ours(signum, frame)

        signal.signal(signal.SIGTERM, later)
        rec.uninstall()  # cannot take ours out of their chain: it must become transparent
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            if len(got) == 2:
                break
        assert got == ["later", "original"]
        assert sink.events == []


def test_signal_is_recorded_then_the_previous_handler_runs() -> None:
    got: list[int] = []
    with Hooks():

        def theirs(signum: int, frame: Any) -> None:
            got.append(signum)

        signal.signal(signal.SIGTERM, theirs)
        sink = Sink(step=9)
        rec = sink.recorder()
        rec.install()
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes
            if got:
                break
        assert got == [signal.SIGTERM]
        (ev,) = sink.events
        assert ev["type"] == EV_SIGNAL and ev["signal"] == "SIGTERM" and ev["step"] == 9
        assert sink.calls[-1] == ("flush", True)
        rec.uninstall()
        assert signal.getsignal(signal.SIGTERM) is theirs


@contextlib.contextmanager
def _sigterm_while_a_worker_dies(
    loader_check: Any, calls: list[str], writing: list[bool] | None = None
) -> Iterator[tuple[CrashRecorder, Sink]]:
    """A recorder installed over the user's SIGTERM handler (which appends "theirs" to
    ``calls``) and a DataLoader's SIGCHLD handler ``loader_check``; the record's write
    sees a SIGCHLD, as when the workers die of the same SIGTERM. ``writing[0]`` is True
    while the record is written."""
    old_chld = signal.getsignal(signal.SIGCHLD)
    with Hooks():
        signal.signal(signal.SIGCHLD, loader_check)
        signal.signal(signal.SIGTERM, lambda signum, frame: calls.append("theirs"))
        try:
            sink = Sink(step=3)

            def emit(rec: dict[str, Any]) -> None:
                if writing is not None:
                    writing[0] = True
                os.kill(os.getpid(), signal.SIGCHLD)  # a worker died meanwhile
                for _ in range(1000):  # where Python would run a handler
                    pass
                sink.calls.append(rec)
                if writing is not None:
                    writing[0] = False

            rec = CrashRecorder(emit, sink.flush, lambda: sink.step)
            rec.install()
            try:
                yield rec, sink
            finally:
                rec.uninstall()
        finally:
            signal.signal(signal.SIGCHLD, old_chld)


def test_a_sigchld_during_the_record_runs_its_handler_once_after_it() -> None:
    """A DataLoader's SIGCHLD handler raises when its workers die of the same SIGTERM:
    it must not run inside the record's write (the record was lost), but once after it,
    and stay installed."""
    calls: list[str] = []
    writing = [False]

    def loader_check(signum: int, frame: Any) -> None:
        calls.append("inside the write" if writing[0] else "after")

    with _sigterm_while_a_worker_dies(loader_check, calls, writing) as (_, sink):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            if "theirs" in calls:
                break
        assert calls == ["after", "theirs"]
        (ev,) = sink.events
        assert ev["type"] == EV_SIGNAL and ev["signal"] == "SIGTERM"
        assert signal.getsignal(signal.SIGCHLD) is loader_check


def test_a_held_sigchld_that_raises_still_lets_the_users_handler_run() -> None:
    """The DataLoader's check raises ("worker exited unexpectedly") when its workers died
    of the same SIGTERM: the user's own SIGTERM handler must still run, and the loader's
    error still reach the training loop."""
    calls: list[str] = []

    def loader_check(signum: int, frame: Any) -> None:
        calls.append("loader")
        raise RuntimeError("DataLoader worker exited unexpectedly")

    with _sigterm_while_a_worker_dies(loader_check, calls):
        with pytest.raises(RuntimeError, match="worker exited"):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        assert calls == ["loader", "theirs"]


def test_a_second_sigterm_while_the_first_is_recorded_is_not_a_second_event() -> None:
    """A demo whose `dltop demo` parent died gets SIGTERM twice at once (parent death and
    its process group): the nested handler call must not record it again (it did, about
    every other run of test_killing_the_demo_command_still_stops_the_demo)."""
    got: list[int] = []
    with Hooks():

        def theirs(signum: int, frame: Any) -> None:
            got.append(signum)

        signal.signal(signal.SIGTERM, theirs)
        sink = Sink(step=3)
        rec = sink.recorder()
        rec.install()
        first_flush = sink.flush

        def flush_then_signalled(fsync: bool) -> None:  # the second signal lands mid-flush
            first_flush(fsync)
            if len(sink.events) == 1 and not got:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass

        rec._flush = flush_then_signalled
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            if got:
                break
        assert [e["signal"] for e in sink.events] == ["SIGTERM"]
        assert got == [signal.SIGTERM], "the user's handler ran once, for the outer call"
        os.kill(os.getpid(), signal.SIGTERM)  # a later, separate SIGTERM is recorded again
        for _ in range(1000):
            if len(got) == 2:
                break
        assert len(sink.events) == 2
        rec.uninstall()


def test_sigint_default_still_raises_keyboard_interrupt() -> None:
    with Hooks():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sink = Sink()
        rec = sink.recorder()
        rec.install()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        assert sink.events[0]["signal"] == "SIGINT"
        rec.uninstall()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ignored_signals_stay_ignored() -> None:
    with Hooks():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        rec = Sink().recorder()
        rec.install()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == rec._handler
        rec.uninstall()


def test_sighup_is_recorded_unless_nohup_ignores_it() -> None:
    """A training started from an ssh session dies by SIGHUP when the session drops: that
    is recorded like SIGTERM. Under ``nohup`` SIGHUP is ignored, and stays so."""
    with Hooks():
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        rec = Sink().recorder()
        rec.install()
        assert signal.getsignal(signal.SIGHUP) == rec._handler
        rec.uninstall()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        rec.install()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        rec.uninstall()


def test_install_off_the_main_thread_leaves_signals_alone() -> None:
    with Hooks() as saved:
        rec = Sink().recorder()
        t = threading.Thread(target=rec.install)
        t.start()
        t.join()
        assert sys.excepthook == rec._hook  # the excepthook is process-wide: installed
        for s, h in saved.handlers.items():
            assert signal.getsignal(s) == h
        rec.uninstall()
        assert sys.excepthook is saved.hook


# -- end to end: the real Probe in a real training process ----------------------------

SCRIPT = Path(__file__).resolve().parents[1] / "crash_scripts" / "tiny_train.py"


# A job started in the background by a non-interactive shell (CI) inherits SIGINT ignored,
# and the probe rightly leaves an ignored signal alone; a user's training in a terminal
# has the default. This shim restores the default, then execs the training.
_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.signal(signal.SIGHUP, signal.SIG_DFL); "  # and SIGHUP, which nohup ignores
    "os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
)


def _start(mode: str, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SIGINT_DEFAULT, str(SCRIPT), mode, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(mode: str, log: Path) -> subprocess.CompletedProcess[str]:
    proc = _start(mode, log)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _records(log: Path) -> tuple[list[dict[str, Any]], Any]:
    records, dec = read_records(str(log))
    assert records and records[0]["kind"] == "meta"
    return records, dec


def _events(records: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == EVENT and r["type"] == type_]


def _steps(records: list[dict[str, Any]]) -> list[int]:
    return [r["step"] for r in records if r["kind"] == "step"]


def _kill_after_steps(log: Path, sig: int, steps: int = 5) -> subprocess.CompletedProcess[str]:
    """Start a training loop, wait until ``steps`` are in its log, then send ``sig``."""
    proc = _start("loop", log)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and proc.poll() is None:
            if log.exists() and len(_steps(read_records(str(log))[0])) >= steps:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_exception_leaving_the_with_block_is_recorded_and_re_raised(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    res = _run("exception", log)
    assert res.returncode == 1
    # Python's own report, with nothing of ours before it (third-party warnings aside)
    assert _ours(res.stderr).startswith("Traceback (most recent call last):")
    assert res.stderr.rstrip().endswith("ValueError: injected failure at step 5")
    records, dec = _records(log)
    assert dec.malformed == 0
    (ev,) = _events(records, EV_EXCEPTION)  # once, though the excepthook saw it too
    assert ev["exc_type"] == "ValueError" and ev["message"] == "injected failure at step 5"
    assert ev["step"] == 5 and _steps(records) == list(range(6))
    assert ev["traceback"][-1]["code"] == 'raise ValueError("injected failure at step 5")'
    assert ev["traceback"][-1]["file"] == str(SCRIPT)
    assert ev["traceback"][0]["func"] == "<module>"  # the whole stack, as Python prints it
    (exit_ev,) = _events(records, "exit")
    assert exit_ev["status"] == "exception" and records.index(ev) < records.index(exit_ev)


def test_uncaught_exception_outside_a_with_block_goes_through_the_excepthook(
    tmp_path: Path,
) -> None:
    log = tmp_path / "run.jsonl"
    res = _run("uncaught", log)
    assert res.returncode == 1
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in res.stderr
    records, _ = _records(log)
    (ev,) = _events(records, EV_EXCEPTION)
    assert ev["exc_type"] == "RuntimeError" and ev["message"].startswith("mat1 and mat2")
    assert ev["step"] == 4
    funcs = [f["func"] for f in ev["traceback"]]
    assert "main" in funcs and funcs[-1] == "forward"  # innermost: torch's Linear.forward
    assert _events(records, "exit")[0]["status"] == "exception"


def test_sigterm_is_recorded_and_the_process_dies_by_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    res = _kill_after_steps(log, signal.SIGTERM)
    assert res.returncode == -signal.SIGTERM, res.stderr
    assert _ours(res.stderr) == ""  # died by the signal: no traceback, as without the probe
    records, dec = _records(log)
    assert dec.malformed == 0
    (ev,) = _events(records, EV_SIGNAL)
    assert ev["signal"] == "SIGTERM"
    steps = _steps(records)
    assert ev["step"] == steps[-1] and steps == list(range(len(steps)))
    assert records[-1] == ev  # flushed last; nothing ran after it (no exit event)


def test_sighup_is_recorded_and_the_process_dies_by_sighup(tmp_path: Path) -> None:
    """The ssh session that started the run went away: the log says so (it used to end
    with no word, which dltop read as a SIGKILL or the OOM killer), and ``dltop check``
    calls the run signalled with SIGHUP's meaning."""
    log = tmp_path / "run.jsonl"
    res = _kill_after_steps(log, signal.SIGHUP)
    assert res.returncode == -signal.SIGHUP, res.stderr
    assert _ours(res.stderr) == ""
    records, _ = _records(log)
    (ev,) = _events(records, EV_SIGNAL)
    assert ev["signal"] == "SIGHUP" and records[-1] == ev
    assert event_ending(ev) == Ending.SIGNALLED  # how dltop reads it: killed from outside


@pytest.mark.slow
def test_sigint_is_recorded_and_still_raises_keyboard_interrupt(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    res = _kill_after_steps(log, signal.SIGINT)
    # Python ends an uncaught KeyboardInterrupt by re-raising SIGINT on itself
    assert res.returncode == -signal.SIGINT
    assert res.stderr.rstrip().endswith("KeyboardInterrupt")
    records, _ = _records(log)
    (ev,) = _events(records, EV_SIGNAL)
    assert ev["signal"] == "SIGINT"
    (exit_ev,) = _events(records, "exit")
    assert exit_ev["status"] == "interrupted"
    assert records.index(ev) < records.index(exit_ev)
    for crash in _events(records, EV_EXCEPTION):  # if recorded, never as a crash
        assert crash["interrupted"] is True and crash["exc_type"] == "KeyboardInterrupt"


@pytest.mark.slow
def test_cpu_oom_under_rlimit_as_is_recorded_with_memory_state(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    res = _run("oom", log)
    assert res.returncode == 1
    assert "DefaultCPUAllocator: can't allocate memory" in res.stderr
    cap = int(res.stdout.split()[1])
    records, _ = _records(log)
    (ev,) = _events(records, EV_OOM)
    assert not _events(records, EV_EXCEPTION)
    assert ev["exc_type"] == "RuntimeError" and ev["step"] == 2
    mem = ev["memory"]
    assert mem["device"] == "cpu"
    assert mem["rlimit_as_soft"] == mem["rlimit_as_hard"] == cap
    assert mem["requested"] >= 8 << 20 and mem["requested"] & (mem["requested"] - 1) == 0
    assert 0 < mem["rss"] <= mem["vms"] <= cap
    assert mem["vms"] + mem["requested"] > cap  # the request is what did not fit
    assert mem["mem_available"] > 0
    assert _events(records, "exit")[0]["status"] == "exception"


def test_sigkill_leaves_a_readable_log(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    res = _kill_after_steps(log, signal.SIGKILL, steps=20)
    assert res.returncode == -signal.SIGKILL
    records, dec = _records(log)
    assert dec.malformed <= 1  # at most the last line, cut mid-write
    steps = _steps(records)
    assert len(steps) >= 20 and steps == list(range(len(steps)))
    assert not _events(records, "exit")
    data = log.read_bytes()
    assert dec.malformed == (0 if data.endswith(b"\n") else 1)
