"""One log, several runs: a rewind to a checkpoint, a restart appended, two writers at once.

Why: the rules judge one continuous training. When the steps go back (the job reloaded a
checkpoint), or a new ``meta`` record says another process took over the file, the
windows, baselines and minima of the earlier part would compare two different trainings
("the loss is 5x its minimum" where the minimum belongs to the run before the rewind).
Each such boundary starts a new *segment*: the engine judges it with fresh rules and
keeps the alerts already raised. Two processes appending to one path at the same time
interleave their steps (their numbers go back and forth); their records cannot be told
apart, so the step rules stop and one ``mixed_runs`` warning says so.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from dltop.tui.core.alerts import WARNING, Alert

if TYPE_CHECKING:
    from dltop.tui.core.rules.engine import RuleEngine


def run_identity(meta: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What tells two runs apart in their ``meta``: pid, run id, start time."""
    return meta.get("pid"), meta.get("run_id"), meta.get("t")


class Segments:
    """Survives the engine's resets: which runs wrote the file and where segments begin."""

    def __init__(self, section: dict[str, Any]) -> None:
        # backward jumps of the step number among the last ``window`` step records, after a
        # second run announced itself, that mean two writers rather than a resume: a resume
        # goes back once and then counts up; two loops appending at once go back on almost
        # every switch between them
        self.on = bool(section["enabled"])
        self.jumps = max(2, int(section["jumps"]))
        self.runs: list[dict[str, Any]] = []  # every distinct meta, in order
        self.starts: list[tuple[int | None, str]] = []  # (first step, why) of each later segment
        self.mixed: Alert | None = None  # the mixed_runs alert, once two writers are seen
        self._recent: deque[bool] = deque(
            maxlen=max(self.jumps, int(section["window"]))
        )  # step went back?
        self._back = 0  # how many of _recent are True
        self.watching = False  # see _watch

    def on_meta(self, meta: dict[str, Any]) -> bool:
        """A ``meta`` record: True when it announces a run not seen before in this file
        (the first one included)."""
        ident = run_identity(meta)
        if any(run_identity(m) == ident for m in self.runs):
            return False  # the same run's meta again (a re-sent backlog, a reconnect)
        self.runs.append(meta)
        self._watch()
        self._recent.clear()
        self._back = 0
        return True

    def _watch(self) -> None:
        """Whether step order is being watched (``watching``): only once a second run
        announced itself, until two writers are found. A plain attribute, set here when
        ``runs`` or ``mixed`` change, because the engine reads it on every step."""
        self.watching = self.on and len(self.runs) >= 2 and self.mixed is None

    def on_step(self, went_back: bool) -> bool:
        """A step record while :attr:`watching`: True when the file just turned out to hold
        two writers at once (reported once)."""
        recent = self._recent
        if len(recent) == recent.maxlen and recent[0]:
            self._back -= 1
        recent.append(went_back)
        self._back += went_back
        return self._back >= self.jumps

    def raise_mixed(self, e: RuleEngine, step: int) -> None:
        pids = [m.get("pid") for m in self.runs]
        ids = [m.get("run_id") for m in self.runs]
        n = len(self.runs)
        self.mixed = Alert(
            id="mixed_runs",
            severity=WARNING,
            step=step,
            title="Several runs write to this log",
            message=(
                f"{n} runs append to this file at the same time (pids "
                f"{', '.join(str(p) for p in pids)}): their steps interleave and cannot be "
                f"told apart, so the loss, gradient and timing rules stop at step {step}"
            ),
            evidence={"runs": n, "pids": pids, "run_ids": ids, "raised_at_step": step},
            last_step=step,
            t=e.t,
        )
        e.sink.add(self.mixed)
        self._watch()
