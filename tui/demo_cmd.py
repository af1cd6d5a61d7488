"""Run a demo training that really fails and watch dltop catch it: ``dltop demo NAME``.

The training runs as a separate process (``python -m dltop.demos.NAME --out LOG``), so
the viewer stays what it always is, a reader of a log, and never imports torch: the
demo is a real run that a real viewer follows live. Quitting the viewer stops the demo
and everything it started (its DataLoader workers, say): the demo runs in a session and
process group of its own, which gets SIGTERM (the probe records it), then SIGKILL for
whatever is left after a grace period. ``--no-ui`` runs it headless for scripts and
tests and prints the log path; a demo killed by a signal exits with ``128 + signal``,
as a shell reports it. The catalogue (names, what each
breaks, the alert it must end with) lives in ``dltop.demos._common``, which imports no
torch either.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..demos._common import DEMOS, add_run_arguments, default_log_path, missing_framework
from .core.text.safetext import visible

EXIT_USAGE = 2
TORCH_HINT = "pip install torch==2.13.0"
LOG_WAIT_S = 120.0  # importing torch on a busy laptop can take a while
STOP_WAIT_S = 5.0  # after SIGTERM, before SIGKILL


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME", help="the demo to run (see --list)")
    parser.add_argument("--list", action="store_true", help="one line per demo: what it breaks")
    parser.add_argument(
        "--no-ui", action="store_true", help="run headless, wait for it, print the log path"
    )
    add_run_arguments(parser)  # passed on to the demo


def list_lines() -> list[str]:
    """``name — what breaks`` for every demo, names aligned."""
    width = max(len(n) for n in DEMOS)
    return [f"{d.name.ljust(width)} — {d.breaks}" for d in DEMOS.values()]


def _error(message: str) -> int:
    print(f"dltop demo: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    if args.list:
        print("\n".join(list_lines()))
        return 0
    names = ", ".join(DEMOS)
    if not args.name:
        return _error(
            f"give a demo NAME, one of: {names} (`dltop demo --list` says what each breaks)"
        )
    if args.name not in DEMOS:
        return _error(f"unknown demo '{visible(args.name)}'; choose one of: {names}")
    # Looked up, never imported: the viewer stays torch-free; only the demo process loads it.
    if importlib.util.find_spec("torch") is None:
        return _error(f"the demos train with PyTorch, which is not installed here ({TORCH_HINT})")
    missing = missing_framework(args.name)  # the same line the demo itself would say
    if missing is not None:
        return _error(missing)

    log = Path(args.out or default_log_path(args.name))
    unusable = _unwritable(log)
    if unusable is not None:  # said now, not after a training that wrote nowhere
        return _error(unusable)
    cmd = [sys.executable, "-m", f"dltop.demos.{args.name}", "--out", str(log)]
    cmd += ["--device", args.device] + (["--fast"] if args.fast else [])
    if args.no_ui:
        return _run_headless(args.name, cmd, log)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("dltop demo: not a terminal, so no viewer; running headless", file=sys.stderr)
        return _run_headless(args.name, cmd, log)
    return _run_with_viewer(args.name, cmd, log)


def _unwritable(log: Path) -> str | None:
    """Why the demo could not write its log at ``log`` (its folder is created), or None."""
    shown = visible(str(log))
    if log.is_dir():
        return f"--out {shown} is a directory (hint: name a file, e.g. {shown}/demo.jsonl)"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the folder of {shown}: {exc.strerror or exc}"
    target = log if log.exists() else log.parent
    if not os.access(target, os.W_OK):
        return f"cannot write {shown}: permission denied (hint: pick another --out)"
    return None


def _expects_crash(name: str) -> bool:
    """Demos whose training is meant to die with an exception (the alert is the crash itself)."""
    return DEMOS[name].alert in ("oom", "crash")


def exit_status(code: int) -> int:
    """A child's return code as a shell reports it: death by signal N is ``128 + N``."""
    return 128 - code if code < 0 else code


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _run_headless(name: str, cmd: list[str], log: Path) -> int:
    proc = subprocess.Popen(cmd)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        print(f"\ndltop demo: {name} interrupted; log: {log}", file=sys.stderr)
        return 130
    if not log.exists():
        print(f"dltop demo: {name} {_how_it_ended(code)} before writing {log}", file=sys.stderr)
        return exit_status(code) or 1
    print(log)
    # a crash demo is meant to die of its exception (exit code 1); a signal is not that
    expected = code > 0 and _expects_crash(name)
    note = " (expected: this demo crashes on purpose)" if expected else ""
    status = f"training {_how_it_ended(code)}{note}; " if code else ""
    print(f"dltop demo: {status}diagnose it with: dltop check {log}", file=sys.stderr)
    return 0 if code == 0 or expected else exit_status(code)


def _run_with_viewer(name: str, cmd: list[str], log: Path) -> int:
    output = log.with_suffix(".out")  # the demo's own prints: they would garble the screen
    with open(output, "wb") as out:
        # A session of its own: the terminal's Ctrl-C goes to the viewer, which then stops
        # the demo itself (and the probe records the SIGTERM).
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads run yet at this point
        )
    try:
        if not _wait_for_log(proc, log):
            _stop(proc, group=True)
            tail = output.read_text(errors="replace").strip().splitlines()[-5:]
            detail = ("\n  " + "\n  ".join(tail)) if tail else ""
            print(f"dltop demo: {name} did not start (no log at {log}){detail}", file=sys.stderr)
            return 1
        code = _open_viewer(str(log))
    finally:
        _stop(proc, group=True)
    print(
        f"dltop demo: {name} stopped. Log: {log} (demo output: {output})\n"
        f"  replay: dltop {log}    diagnose: dltop check {log}",
        file=sys.stderr,
    )
    return code


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when ``dltop demo`` dies, even by SIGKILL (Linux).

    Quitting the viewer stops the demo in ``finally``; this covers the rest (the terminal
    closed, the viewer killed), so a demo never trains on unwatched in the background.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # noqa: PLC0415 - only in the child, only on Linux

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # best effort: the demos end on their own within a minute or two


def _wait_for_log(proc: subprocess.Popen[bytes], log: Path) -> bool:
    """Wait until the probe has created the log (torch imports first), or the demo died."""
    deadline = time.monotonic() + LOG_WAIT_S
    while time.monotonic() < deadline:
        if log.exists() and log.stat().st_size > 0:
            return True
        if proc.poll() is not None:
            return log.exists()
        time.sleep(0.1)
    return False


def _open_viewer(source: str) -> int:
    """Open the dashboard on ``source`` through the viewer command, as ``dltop SOURCE`` would."""
    from . import view_cmd  # noqa: PLC0415 - Textual loads only when the UI starts

    parser = argparse.ArgumentParser(prog="dltop")
    view_cmd.configure(parser)
    return int(view_cmd.run(parser.parse_args([source])) or 0)


def _stop(proc: subprocess.Popen[bytes], group: bool = False) -> None:
    """Terminate the demo (the probe records the signal), then kill what lingers.

    With ``group``, the demo leads a process group of its own (``start_new_session``):
    SIGTERM goes to the whole group, so its DataLoader workers and any other children
    stop too, and once the demo has exited, or the grace period is over, SIGKILL
    removes whatever is left. The group is only signalled while the demo is not yet
    reaped: until then its pid, which names the group, cannot belong to anyone else.
    """
    if proc.returncode is not None:
        return  # reaped long ago: its group id may have been reused; nothing to signal
    try:
        _signal(proc, signal.SIGTERM, group)
        if not _exited(proc, STOP_WAIT_S):
            _signal(proc, signal.SIGKILL, group)
        elif group:
            _signal(proc, signal.SIGKILL, group)  # children that outlived the demo
        proc.wait()
    except KeyboardInterrupt:  # a second Ctrl-C while waiting: do not leave it behind
        _signal(proc, signal.SIGKILL, group)
        proc.wait()


def _signal(proc: subprocess.Popen[bytes], sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to ``timeout`` s for the demo to exit, leaving it unreaped (a zombie keeps
    its pid, and so its process group id, from being reused while we signal it)."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # not on every platform: wait and reap (a window of microseconds)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # reaped elsewhere
        if info is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
