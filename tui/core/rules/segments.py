"""One log, several runs: a rewind to a checkpoint, a restart appended, two writers at once.

Why: the rules judge one continuous training. When the steps go back (the job reloaded a
checkpoint), or a new ``meta`` record says another process took over the file, the
windows, baselines and minima of the earlier part would compare two different trainings
("the loss is 5x its minimum" where the minimum belongs to the run before the rewind).
Each such boundary starts a new *segment*: the engine judges it with fresh rules and
keeps the alerts already raised. Two processes appending to one path at the same time
interleave their steps (their numbers go back and forth, or, in lockstep, each step number
comes twice in a row); their records cannot be told apart, so the step rules stop and one
``mixed_runs`` warning says so. Two trainings at different loss levels written in
lockstep used to read as one loss swinging up and down (``oscillation``, issue 29).
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import TYPE_CHECKING, Any

from ....probe.schema import Record, Records
from .alerts import WARNING, Alert

if TYPE_CHECKING:
    from .alerts import AlertSink


MAX_RUNS_KEPT = 16  # metas kept to name the writers in a mixed_runs alert; the rest are counted


MAX_KEY_TEXT = 256  # characters of a run's identity kept as is; a longer one is a digest


def run_identity(meta: Record) -> tuple[Any, Any, Any] | bytes:
    """What tells two runs apart in their ``meta``: pid, run id, start time, as a set key.

    A digest of its ``repr`` when a hostile log gives a list or an object where a scalar
    belongs (not hashable), or a long string: a key is kept for every run of the file,
    and must not hold megabytes of it."""
    ident = meta.get("pid"), meta.get("run_id"), meta.get("t")
    try:
        hash(ident)
        if all(not isinstance(x, str) or len(x) <= MAX_KEY_TEXT for x in ident):
            return ident
    except TypeError:
        pass
    text = repr(ident).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


class Segments:
    """Survives the engine's resets: which runs wrote the file and where segments begin."""

    def __init__(self, section: dict[str, Any]) -> None:
        # backward jumps of the step number among the last ``window`` step records, after a
        # second run announced itself, that mean two writers rather than a resume: a resume
        # goes back once and then counts up; two loops appending at once go back on almost
        # every switch between them
        self.on = bool(section["enabled"])
        self.jumps = max(2, int(section["jumps"]))
        # the first MAX_RUNS_KEPT distinct metas, in order; every run's identity is in
        # ``_seen`` (a set: a file appended by thousands of runs must not cost runs² compares)
        self.runs: Records = []
        self.count = 0  # distinct runs seen
        self._seen: set[tuple[Any, Any, Any] | bytes] = set()
        # (first step, why) of the first MAX_RUNS_KEPT later segments
        self.starts: list[tuple[int | None, str]] = []
        self.mixed: Alert | None = None  # the mixed_runs alert, once two writers are seen
        self.window = max(self.jumps, int(section["window"]))
        self._recent: deque[bool] = deque(maxlen=self.window)  # step went back or repeated?
        # the engine's step count at the latest repeated step numbers (a step record with
        # its predecessor's number) while no second run announced itself
        self._repeats: deque[int] = deque(maxlen=self.jumps)
        self._back = 0  # how many of _recent are True
        self.watching = False  # see _watch

    def on_meta(self, meta: Record) -> bool:
        """A ``meta`` record: True when it announces a run not seen before in this file
        (the first one included)."""
        ident = run_identity(meta)
        if ident in self._seen:
            return False  # the same run's meta again (a re-sent backlog, a reconnect)
        self._seen.add(ident)
        self.count += 1
        if len(self.runs) < MAX_RUNS_KEPT:
            self.runs.append(meta)
        self._watch()
        self._recent.clear()
        self._back = 0
        return True

    def started(self, step: int | None, why: str) -> None:
        """A new segment began at ``step`` (``None``: at a new run's meta record)."""
        if len(self.starts) < MAX_RUNS_KEPT:
            self.starts.append((step, why))

    def _watch(self) -> None:
        """Whether step order is being watched (``watching``): only once a second run
        announced itself, until two writers are found. A plain attribute, set here when
        ``runs`` or ``mixed`` change, because the engine reads it on every step."""
        self.watching = self.on and self.count >= 2 and self.mixed is None

    def on_step(self, went_back: bool) -> bool:
        """A step record while :attr:`watching` (``went_back``: its number went back, or
        repeated its predecessor's): True when the file just turned out to hold two writers
        at once (reported once)."""
        recent = self._recent
        if len(recent) == recent.maxlen and recent[0]:
            self._back -= 1
        recent.append(went_back)
        self._back += went_back
        return self._back >= self.jumps

    def on_repeat(self, steps: int) -> bool:
        """A step record with its predecessor's number while no second run announced
        itself (``steps``: the engine's step count): True when ``jumps`` of them fall within
        ``window`` step records. One repeat is a glitch; repeats that keep coming are two
        loops writing the same steps in lockstep (their second meta lost, or never written)
        or one loop logging each step more than once: not one training's steps."""
        if not self.on or self.mixed is not None:
            return False
        r = self._repeats
        r.append(steps)
        return len(r) == r.maxlen and steps - r[0] < self.window

    def raise_mixed(
        self, sink: AlertSink, t: float | None, step: int, repeated: bool = False
    ) -> None:
        """The ``mixed_runs`` warning; ``repeated``: found by :meth:`on_repeat` (no second
        run announced itself: at least two writers, or one writing each step twice)."""
        pids = [m.get("pid") for m in self.runs]
        ids = [m.get("run_id") for m in self.runs]
        n = self.count
        more = f" and {n - len(pids)} more" if n > len(pids) else ""
        if repeated:
            n = max(n, 2)
            said = (
                f"step numbers come twice in a row ({self.jumps} times within {self.window} "
                "steps): two loops append the same steps to this file, or one logs each step "
                "more than once"
            )
        else:
            said = (
                f"{n} runs append to this file at the same time (pids "
                f"{', '.join(str(p)[:40] for p in pids)}{more}): their steps interleave"
            )
        self.mixed = Alert(
            id="mixed_runs",
            severity=WARNING,
            step=step,
            title="Several runs write to this log",
            message=(
                f"{said}; their records cannot be told apart, so the loss, gradient and timing "
                f"rules stop at step {step}"
            ),
            evidence={
                "runs": n,
                "pids": pids,
                "run_ids": ids,
                "repeated_steps": repeated,
                "raised_at_step": step,
            },
            last_step=step,
            t=t,
        )
        sink.add(self.mixed)
        self._watch()
