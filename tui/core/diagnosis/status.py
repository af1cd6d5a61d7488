"""Run status: running, stalled, finished, crashed or unknown, and why.

The log says most of it: an ``exit`` record (written by the probe on every normal or
abnormal end it can see), exception events, and heartbeats, which the probe's writer
thread emits every ~2 s even while the training loop is stuck. What the log cannot say
is whether a process that went silent is dead (SIGKILL, the kernel's OOM killer) or
hung so hard that even the writer thread stopped; for a run on this host the process
table answers that (``pid_alive``). Thresholds scale with the run's own step time: the
same ones the ``stall`` alert uses.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ....probe.schema import Record, step_or
from ..rules.ending import Ending, signal_name
from ..text.fmt import nbytes
from ..text.fmt import number as fmt
from ..text.textfit import fit

if TYPE_CHECKING:
    from ..rules.ruleset import RuleSet

Status = Literal["running", "stalled", "finished", "crashed", "unknown"]
STATUSES: tuple[Status, ...] = ("running", "stalled", "finished", "crashed", "unknown")


@dataclass(frozen=True)
class RunState:
    """Where a run stands. Ages are in seconds against ``now`` (the wall clock when live)."""

    status: Status
    reason: str
    last_record_age: float | None = None
    last_step_age: float | None = None
    last_step: int | None = None
    steps: int = 0
    pid: int | None = None
    pid_alive: bool | None = None
    # the log stops without an exit record (the process is gone, or silent for long): how
    # the run ended is not in the log, see :func:`explain_unrecorded_end`
    unrecorded_end: bool = False
    # the event that ended the run badly (an exception, an OOM, a fatal signal), as
    # ``ending.RunEnding`` decided: what the crash banner and the report show
    fatal: Record | None = field(default=None, compare=False, repr=False)


def run_state(e: RuleSet, now: float | None = None, pid_alive: bool | None = None) -> RunState:
    """The status of the run the engine has read; ``now=None`` judges at the latest record's time."""
    crashes = e.crash_rule
    stall = e.stall_rule
    pid = (e.meta or {}).get("pid")
    pid = pid if isinstance(pid, int) else None
    ref = now if now is not None else e.last_t
    rec_age = ref - e.last_t if ref is not None and e.last_t is not None else None
    since = stall.since(e)
    step_age = ref - since if ref is not None and since is not None else None

    def state(status: Status, reason: str, unrecorded: bool = False) -> RunState:
        return RunState(
            status,
            reason,
            rec_age,
            step_age,
            e.last_step,
            e.steps,
            pid,
            pid_alive,
            unrecorded,
            crashes.run_ending.fatal_event_at(e.last_step),
        )

    at = f" at step {e.last_step}" if e.last_step is not None else ""
    ending = crashes.run_ending  # how the run ended: decided once (dltop.tui.core.rules.ending)
    last = e.last_step  # steps still in the block in progress count too
    end = ending.ending_at(last)
    fatal = ending.fatal_event_at(last)
    what = _exception_words(fatal) if fatal is not None else ""
    fatal_at = step_or(fatal, e.last_step)
    handled = ending.handled_at(last)
    also = _handled_words(handled, e.last_step) + _nonfinite_end(e)
    if end is Ending.INTERRUPTED:
        return state("finished", f"interrupted by the user{at}{also}")
    if end in (Ending.CRASHED, Ending.OOM):
        where = f" at step {fatal_at}" if fatal_at is not None else at
        return state("crashed", f"{what or 'an exception'}{where}")
    if end is Ending.SIGNALLED:
        return state("crashed", f"terminated by {crashes.signal or 'a signal'}{at}")
    if end is Ending.FINISHED:
        return state("finished", f"finished after {_steps_made(e)}{also}")
    if e.records == 0:
        return state("unknown", "no records yet")
    if e.last_t is None or _foreign(e):
        # another tool's log: no process to ask, and its clock (if any) is history
        return state("unknown", f"the log stops{at}; how the run ended is not in it{also}")
    if pid_alive is False:
        return state(
            "crashed",
            f"process {pid} is gone without an exit record{at} (killed? SIGKILL or the OOM killer leave no trace)",
            unrecorded=True,
        )
    silent = float(e.config.section("stall")["silent_s"])
    if rec_age is not None and rec_age > silent:
        if pid_alive:
            return state(
                "stalled",
                f"process {pid} is alive but wrote nothing for {fmt(rec_age)} s (even heartbeats stopped)",
            )
        return state(
            "unknown",
            f"no record for {fmt(rec_age)} s and no exit record; the process may be gone",
            unrecorded=True,
        )
    if e.phase is not None:
        started = e.phase_since
        if ref is not None and started is not None:
            cap = stall.phase_thresholds()[0]
            if ref - started >= cap:  # a declared phase pauses the watch, but not forever
                return state(
                    "stalled",
                    f"in phase '{e.phase}' for {fmt(ref - started)} s{at} "
                    f"(a phase may pause the watch {fmt(cap)} s)",
                )
        return state("running", f"in phase '{e.phase}'{at}")
    if step_age is not None:
        warn, crit = stall.thresholds()
        if step_age >= warn:
            return state(
                "stalled",
                f"no new step for {fmt(step_age)} s after step {e.last_step} (threshold {fmt(warn)} s)",
            )
    elif e.first_t is not None and ref is not None and ref - e.first_t >= stall.startup:
        return state("stalled", f"no training step {fmt(ref - e.first_t)} s after the start")
    if e.steps == 0:
        return state("running", "started, no step yet")
    return state("running", f"step {e.last_step}")


def _foreign(e: RuleSet) -> bool:
    """Another tool's log (its meta says which): no pid, no heartbeat, no exit of ours."""
    return bool((e.meta or {}).get("format"))


def _steps_made(e: RuleSet) -> str:
    """The run's steps as the status says them: those in the log; when the probe dropped
    records under overload, the exit record's count, which has them all, and how many of
    them the log lacks (the log's own count alone read as a shorter run)."""
    dropped = e.dropped_rule
    total = dropped.exit_steps
    if dropped.records and total is not None and total > e.steps:
        return f"{total} steps, {total - e.steps} of them not in the log"
    return f"{e.steps} steps"


def _exception_words(event: Record) -> str:
    """``ValueError: bad shape`` (bounded), or the signal that ended the run."""
    if event.get("type") == "signal":
        return f"terminated by {signal_name(event, 'a signal')}"
    msg = str(event.get("message") or "").strip()[:1024].splitlines()
    name = str(event.get("exc_type") or event.get("type") or "exception")
    return name + (f": {fit(msg[0], 120)}" if msg else "")  # a number is never cut


def _handled_words(event: Record | None, last_step: int | None) -> str:
    """ "; an exception at step 5 was handled" for a run that went on after it."""
    if event is None:
        return ""
    at = step_or(event, None)
    where = f" at step {at}" if at is not None else ""
    if event.get("type") == "signal":
        return f"; {event.get('signal') or 'a signal'}{where} was handled"
    return f"; an exception{where} was handled ({fit(_exception_words(event), 80)})"


def _nonfinite_end(e: RuleSet) -> str:
    """ "; the loss is NaN at the end (since step 129)": never "normally" for such a run."""
    a = e.nonfinite_rule.loss_t.alert
    if a is None or not a.active:
        return ""
    what = "NaN" if a.title.endswith("NaN") else a.title.removeprefix("Loss is ")
    since = f" since step {a.step}" if a.step is not None else ""
    return f"; the loss is {what} at the end{since}"


def local_pid_alive(meta: Record | None) -> bool | None:
    """Whether the run's process still lives, for a run on this host; ``None`` when unknowable.

    Compares the process start time with the run's start so that a recycled pid of an
    unrelated process does not count as the run being alive. A zombie (exited, not yet
    reaped by its parent, e.g. a launcher that is itself stuck) is dead: it will never
    write another record.
    """
    if not meta:
        return None
    pid, host = meta.get("pid"), meta.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return None  # another machine, or a log that does not say where it ran
    try:
        import psutil  # noqa: PLC0415 - the viewer core may use it; keep import cost off the hot path
    except ImportError:
        return None
    try:
        if not psutil.pid_exists(pid):
            return False
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except Exception:
        return None
    t0 = meta.get("t")
    # a process started after the run began is a recycled pid, not the run
    return not (isinstance(t0, (int, float)) and started > t0 + 2.0)


# Free space below which a log that stops without an exit record is taken to have been
# cut by a full disk: the probe warns once on stderr and trains on, but nothing more
# reaches the file, not even its exit record. A few log lines' worth is not "full".
DISK_FULL_BYTES = 1 << 20


def free_bytes(path: str) -> int | None:
    """Bytes free to this user on the filesystem holding ``path``; None if unknown."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except (OSError, ValueError):
        return None
    return st.f_bavail * st.f_frsize


def explain_unrecorded_end(state: RunState, log_path: str | None) -> RunState:
    """A log that stops without an exit record on a full disk: the disk, not a SIGKILL or
    the OOM killer, is the likely reason the log stops; how the run ended is unknown."""
    if not state.unrecorded_end or not log_path:
        return state
    free = free_bytes(log_path)
    if free is None or free >= DISK_FULL_BYTES:
        return state
    at = f" at step {state.last_step}" if state.last_step is not None else ""
    return replace(
        state,
        status="unknown",
        reason=(
            f"the log stops{at} without an exit record and its disk is full ({nbytes(free)} "
            "free): the probe could not write more (it warned on stderr); how the run ended "
            "is not in the log"
        ),
    )
