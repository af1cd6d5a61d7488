"""A huge log's rules backfill in a process of its own, beside the charts' backfill.

Why: opening a 1 M-step log, the viewer builds the whole run's charts (~3 s) and then
brings a rules engine through the run (~7 s), one after the other on its reader thread
(``backfill.py``). The engine never needs the charts, so on a machine with a second CPU
it can start at once in a child process that reads the same open file (its descriptor is
passed, so a rotation meanwhile cannot swap the file under it) up to a line boundary the
viewer chose, and send back the engine it built (pickled: our own process, our own
classes). The viewer feeds that engine the lines after the boundary itself, then the
records queued while it caught up: every record once, in order, as the in-process path.

The child is a fresh interpreter (``subprocess``: the viewer has threads, so no fork),
costs ~0.2 s to start, and is used for stretches of ``MIN_BYTES`` or more (only huge logs
are backfilled at all: ``sources.TAIL_FIRST``, 16 MiB). Whatever goes
wrong with it (no second interpreter, a crash, an unpicklable result) leaves
:func:`RulesJob.result` with ``None`` and the viewer runs the rules itself, as before.
No Textual. Progress: the child writes the offset it reached, one line on stderr,
every ``PROGRESS`` seconds.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import workers

if TYPE_CHECKING:
    from ..rules import Config, RuleEngine

MIN_BYTES = 8 << 20  # below this the engine takes about as long as the child's start
PROGRESS = 0.2  # seconds between the child's progress lines
READ = 4 << 20  # bytes per read in the child (few reads: see sources.READ_BLOCK)
RESULT_MAX = 256 << 20  # bytes of pickled engine accepted back: an engine is bounded
TAIL = 1 << 20  # bytes looked at for the last line end (start_beside)

# Children running now, from every source of this viewer: a job's folder opens a source per
# rank, and 64 huge rank logs must not start 64 interpreters on a 2-CPU machine. At most
# one per CPU beyond the viewer's own; a source that finds none free runs its rules itself.
_running = 0
_running_lock = threading.Lock()


def _take_slot() -> bool:
    global _running
    with _running_lock:
        if _running >= max(1, workers.cpus() - 1):
            return False
        _running += 1
        return True


def _give_slot() -> None:
    global _running
    with _running_lock:
        _running = max(0, _running - 1)


class RulesJob:
    """The child process running the rules over ``[0, upto)`` of an open log."""

    def __init__(self, proc: subprocess.Popen[bytes], upto: int) -> None:
        self.proc = proc
        self.upto = upto
        self._slot = True  # one of the _running children: given back when it ends
        self.reached = 0  # the offset the child last said it reached
        self._out = bytearray()
        self._err = b""
        self._done = False
        self._failed = False

    @classmethod
    def start(
        cls, fd: int, upto: int, config: Config | None, join: bool = False
    ) -> RulesJob | None:
        """The child, started; ``None`` when it cannot be, or when as many children as
        the machine has spare CPUs already run (the caller runs the rules). ``join``: the
        log is a job's only file, so its own ``grad_sq_local`` shares become its
        ``grad_norm`` before the engine sees a step, as ``dltop check`` reads it."""
        if not _take_slot():
            return None
        try:
            job = pickle.dumps((fd, upto, config, join))
            proc = subprocess.Popen(
                [sys.executable, "-m", "dltop.tui.core.sources.rules_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(fd,),
                start_new_session=True,  # a Ctrl-C meant for the viewer is not its to handle
            )
        except (OSError, ValueError, pickle.PicklingError, TypeError, AttributeError):
            _give_slot()
            return None
        try:
            assert proc.stdin is not None
            proc.stdin.write(job)
            proc.stdin.close()
        except OSError:
            _kill(proc)
            _give_slot()
            return None
        return cls(proc, upto)

    def _release(self) -> None:
        if self._slot:
            self._slot = False
            _give_slot()

    def poll(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the child; True once it has ended (its
        result read). Reads its output as it comes, so a large result never blocks it."""
        if self._done:
            return True
        out, err = self.proc.stdout, self.proc.stderr
        assert out is not None and err is not None
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([out, err], [], [], left)
            for stream in ready:
                data = os.read(stream.fileno(), 1 << 20)
                if stream is err:
                    self._progress(data)
                    continue
                if not data:  # the child closed its result: it is ending
                    self._finish()
                    return True
                self._out += data
                if len(self._out) > RESULT_MAX:
                    self._failed = True
                    self.kill()
                    return True
            if not ready or time.monotonic() >= deadline:
                return False

    def _progress(self, data: bytes) -> None:
        lines = (self._err + data).split(b"\n")
        self._err = lines.pop()[-64:]  # an unfinished line, bounded
        for line in reversed(lines):
            if line.isdigit():
                self.reached = min(int(line), self.upto)
                break

    def _finish(self) -> None:
        self._done = True
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill(self.proc)
            code = -1
        self._failed = self._failed or code != 0
        self._release()

    def result(self) -> tuple[RuleEngine | None, str | None] | None:
        """(engine, error) as the child left them, once :meth:`poll` said it ended;
        ``None`` when the child failed (the caller runs the rules itself)."""
        if not self._done or self._failed:
            return None
        try:
            engine, error, reached = pickle.loads(bytes(self._out))
        except Exception:  # a partial or garbled result: the child died writing it
            return None
        if reached != self.upto and error is None:
            return None  # the file was cut short under it: the caller's generation check
        return engine, error

    def kill(self) -> None:
        _kill(self.proc)
        self._done = True
        self._release()


def start_beside(
    fd: int, config: Config | None, least: int, join: bool, size: int | None = None
) -> RulesJob | None:
    """A child for the rules over the complete lines of the file as it is now (or of its
    first ``size`` bytes: what the reader beside will read of a growing log), beside a
    reader that builds something else from them (``dltop report``'s charts); ``None`` for
    a file under ``least`` bytes, a machine without a spare CPU, or a child that will not
    start."""
    if workers.cpus() < 2:
        return None
    size = os.fstat(fd).st_size if size is None else size
    if size < max(1, least):
        return None
    span = min(size, TAIL)
    cut = os.pread(fd, span, size - span).rfind(b"\n")
    if cut < 0:
        return None  # no line ends in the last TAIL bytes: nothing to split cleanly
    return RulesJob.start(fd, size - span + cut + 1, config, join)


def wait_engine(
    job: RulesJob, on_reached: Callable[[int], None] | None = None
) -> tuple[RuleEngine | None, str | None] | None:
    """The child's engine and error once it ends (``on_reached``: its offset meanwhile),
    ``None`` when it failed; the child is never left running."""
    try:
        while not job.poll(PROGRESS):
            if on_reached is not None:
                on_reached(job.reached)
        return job.result()
    finally:
        job.kill()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _main() -> int:
    """The child: (fd, upto, config, join) on stdin; (engine, error, offset reached) on stdout."""
    from ..ranks.shardnorm import GradNormJoin
    from ..store.pipeline import judge_range

    fd, upto, config, join = pickle.load(sys.stdin.buffer)
    last = time.monotonic()

    def progress(off: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS:
            last = now
            sys.stderr.write(f"{off}\n")
            sys.stderr.flush()

    shares = GradNormJoin().primary() if join else None
    engine, error, off = judge_range(fd, upto, config, shares, READ, progress)
    result: Any = (engine, error, off)
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
