"""Independent jobs in worker processes, their results in order (``dltop check`` of a job).

Why processes: the rules are pure Python and hold the GIL, so threads would only take
turns; a job's ranks are independent (each rank's log has its own engine), so on N CPUs
a job of many ranks is checked about N times faster.

Why fork only: a forked worker starts in milliseconds with every module already imported
(a spawned one imports dltop again, ~0.3 s each), but fork copies the calling thread
alone, so it is used only while this process runs no other thread, and only on Linux
(macOS's system libraries are not fork-safe). Anywhere else the jobs run here, one after
the other, with the same results.

A worker that dies (the kernel's OOM killer) breaks the pool: the jobs whose results
had not come back run here instead. Workers ignore SIGINT: on Ctrl-C this process stops
them and says "interrupted" once, instead of one traceback per worker. No Textual.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether worker processes may be forked from here now (see the module's docstring)."""
    return (
        sys.platform == "linux"
        and threading.active_count() == 1
        and not multiprocessing.current_process().daemon  # a daemon may have no children
        and "fork" in multiprocessing.get_all_start_methods()
    )


def _ignore_sigint() -> None:
    """A worker's first act: Ctrl-C is its parent's to handle. SIGINT was blocked across
    the fork (``ordered_map``), so one that came before this line waits, pending; ignored
    first, it is dropped when unblocked. Without the block, a Ctrl-C in the instant
    between the fork and here raised KeyboardInterrupt in the worker, which printed
    "Process ForkProcess-2:" beside the one line ``dltop check`` says (a CI run)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def ordered_map(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[R]:
    """``fn(item)`` for each item, in the items' order: in up to ``workers`` forked
    processes when there are two or more items and forking is safe, else here.

    ``fn`` must be a module-level function, and its argument and result picklable. An
    exception ``fn`` raises comes out here, as it would from a plain loop."""
    if workers < 2 or len(items) < 2 or not can_fork():
        for item in items:
            yield fn(item)
        return
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(items)),
        mp_context=multiprocessing.get_context("fork"),
        initializer=_ignore_sigint,
    )
    # the workers are forked by the first submit: SIGINT blocked across it (this thread,
    # and the pool's thread it starts), unblocked in each worker once it ignores SIGINT
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        try:
            futures = [pool.submit(fn, item) for item in items]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C meanwhile: raised here
    except (OSError, RuntimeError) as exc:  # no process to be had (ulimit -u, no memory)
        _stop(pool)
        sys.stderr.write(f"dltop: note: no worker processes ({exc}); working in this one\n")
        futures = []
    except BaseException:  # Ctrl-C while the workers start: they would run their jobs out
        _stop(pool)
        raise
    done = 0
    try:
        for future in futures:
            try:
                result = future.result()
            except BrokenProcessPool:
                break  # a worker died: the rest run here, below
            yield result
            done += 1
    except BaseException:  # Ctrl-C, an exception of fn, the caller stopped early
        _stop(pool)
        raise
    pool.shutdown(wait=True)  # every worker is idle (or the pool broke): a quick exit
    for item in items[done:]:
        yield fn(item)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now: a worker still busy with a
    cancelled job would otherwise keep the interpreter from exiting until it is done.
    ``_processes`` is the executor's own (no public way to end its workers); read before
    ``shutdown``, which drops it."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        try:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=1.0)
        except (OSError, ValueError, AssertionError):
            pass
