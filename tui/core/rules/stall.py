"""Stalls: no new step for much longer than this run's steps take.

A timing rule: it ignores steps inside declared phases and the first step after one, whose
step time includes the evaluation or checkpoint. Stalls are judged against record
timestamps (heartbeats keep arriving while the training loop hangs), so a replayed log
finds the same stall a live viewer did. A declared phase pauses the stall watch only up
to a cap: an evaluation that hangs is still a hang.
"""

from __future__ import annotations

from operator import sub
from typing import TYPE_CHECKING, Any, cast

from ....probe.schema import Record, as_float
from ..text.fmt import number as fmt
from .alerts import CRITICAL, INFO, WARNING, Alert, Severity
from .base import Rule, Tracker
from .window import Rolling

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block


class Stall(Rule):
    """No new step for much longer than this run's steps take, while the process still writes."""

    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("stall")
        self.wf, self.cf = float(c["warn_factor"]), float(c["critical_factor"])
        self.wfloor, self.cfloor = float(c["floor_s"]), float(c["critical_floor_s"])
        self.startup = float(c["startup_s"])
        self.phase_floor = float(c["phase_floor_s"])
        self.intervals = Rolling(200, 50, q=0.95)
        self.tr = Tracker(engine, "stall")
        self.pause_end: float | None = None  # end of the latest phase: the clock restarts there
        self.phase_alert = False  # the stall alert up now is a phase that ran too long
        self.explained_by_eval = False
        self.prev_t: float | None = None  # time of the previous step (judged per block)
        self.prev_step: int | None = None
        self.last_eval_step: int | None = None
        self.clock_seen = False  # a heartbeat or sys record: the process's clock between steps

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def thresholds(self) -> tuple[float, float]:
        p95 = self.intervals.quantile or 0.0
        return max(self.wf * p95, self.wfloor), max(self.cf * p95, self.cfloor)

    def phase_thresholds(self) -> tuple[float, float]:
        """How long a declared phase may pause the watch (warning), and the critical line.

        The warning line is the step watch's critical factor (a phase is expected to take
        long), with its own floor; the critical line keeps the step watch's critical/warn
        ratio (3x by default).
        """
        p95 = self.intervals.quantile or 0.0
        warn = max(self.cf * p95, self.phase_floor)
        ratio = max(1.0, self.cf / self.wf) if self.wf > 0 else 3.0
        return warn, warn * ratio

    def since(self, e: EngineState) -> float | None:
        ref = e.last_step_t
        if self.pause_end is not None and (ref is None or self.pause_end > ref):
            ref = self.pause_end
        return ref

    def on_block(self, e: EngineState, blk: Block) -> None:
        prev = self.prev_t
        ts = blk.t
        if (
            prev is not None
            and None not in ts
            and all(blk.timing)
            and (self.pause_end is None or self.pause_end <= prev)
        ):
            # the common case, without a Python loop per step
            fts = cast(list[float], ts)  # no None: checked just above
            gaps = list(map(sub, fts, [prev, *fts[:-1]]))  # t[i] - t[i-1]
            longest = max(gaps)
            if longest >= self.thresholds()[0]:  # rare: a long gap, or the wall clock jumped
                self._clock_jumped(e, blk.recs[max(range(len(gaps)), key=gaps.__getitem__)])
                gaps = [_monotonic_gap(g, r) for g, r in zip(gaps, blk.recs, strict=True)]
                longest = max(gaps)
            self.intervals.extend(gaps)  # (may move the thresholds: asked again below)
            resumed_at = blk.steps[0]
            if longest >= self.thresholds()[0] and self.on and not self.explained_by_eval:
                i = max(range(len(gaps)), key=gaps.__getitem__)
                self._fire(
                    e, blk.steps[i - 1] if i else self.prev_step, gaps[i], fts[i], resumed=True
                )
                resumed_at = blk.steps[i]
            if self.tr.active and self._after_stall(blk.steps[-1]):
                self.tr.clear(resumed_at)
                self.explained_by_eval = False
            self.prev_t = ts[-1]
            self.prev_step = blk.steps[-1]
            return
        warn = self.thresholds()[0]
        for step, t, ok, rec in zip(blk.steps, blk.t, blk.timing, blk.recs, strict=True):
            if t is None:
                continue
            if prev is not None and ok:
                raw = t - max(prev, self.pause_end or prev)
                if raw >= warn:
                    self._clock_jumped(e, rec)
                gap = _monotonic_gap(raw, rec)
                if gap >= 0:
                    if gap >= warn and self.on and not self.explained_by_eval:
                        self._fire(e, self.prev_step, gap, t, resumed=True)
                    self.intervals.push(gap)
            prev = t
            self.prev_step = step
            if self.tr.active and self._after_stall(step):
                self.tr.clear(step)
                self.explained_by_eval = False
        self.prev_t = prev

    def _after_stall(self, step: int) -> bool:
        """A step after the one the stall waits behind: training resumed. The steps before
        it, still buffered in the block that closes at the log's end (a killed job), do not
        end the stall."""
        a = self.tr.alert
        last = a.evidence.get("last_step") if a is not None else None
        return type(last) is not int or step > last

    def _clock_jumped(self, e: EngineState, rec: Record) -> None:
        """A stall raised from heartbeats while no step came, withdrawn when the step that
        ends the wait shows (its monotonic ``step_time``) that hardly any time passed: the
        wall clock jumped forward (NTP, a suspended VM), training never stopped."""
        a = self.tr.alert
        st = as_float(rec.get("step_time"))
        if a is None or not a.active or self.phase_alert or st is None or not st >= 0:
            return
        if a.evidence.get("resumed") is False and st < self.thresholds()[0]:
            self.tr.retract()

    def on_event(self, e: EngineState, rec: Record) -> None:
        if rec.get("type") != "phase":
            return
        t = as_float(rec.get("t"))
        if rec.get("state") == "end":  # the engine keeps the phase itself (e.phase_since)
            start = e.phase_since
            if self.on and start is not None and t is not None:
                self._phase_ended(e, t - start, t)
            self.pause_end = t

    def _phase_ended(self, e: EngineState, took: float, t: float) -> None:
        """A phase that ran past its cap but ended normally was slow, not hung: information."""
        warn = self.phase_thresholds()[0]
        if took < warn:
            return
        a = self.tr.alert
        if not (self.phase_alert and a is not None and a.active):
            a = self._fire_phase(e, took, t)  # no heartbeats during it: found afterwards
        self.tr.revise(
            {"resumed": True},
            severity=INFO,
            title=f"Long phase '{e.phase_name}'",
            message=a.message + f"; the phase ended normally after {fmt(took)} s",
        )

    def on_eval(self, e: EngineState, rec: Record) -> None:
        self.last_eval_step = e.last_step
        a = self.tr.alert
        if e.phase is not None:
            return  # an eval inside a declared phase explains nothing: the phase's end does
        if a is not None and a.active and not self.explained_by_eval:
            self._explain(a)

    def _explain(self, a: Alert) -> None:
        """The pause ended in an evaluation the user did not declare as a phase: information only."""
        self.explained_by_eval = True
        self.tr.revise(
            severity=INFO,
            title="Pause before an evaluation",
            message=a.message
            + "; an eval record followed: probably evaluation (wrap it in probe.phase('eval'))",
        )

    def on_time(self, e: EngineState, t: float) -> None:
        self.clock_seen = True
        if not self.on or self.explained_by_eval:
            return
        if e.phase is not None:
            start = e.phase_since
            if start is not None and t - start >= self.phase_thresholds()[0]:
                self._fire_phase(e, t - start, t)
            return
        ref = self.since(e)
        if ref is None:
            if e.first_t is not None and t - e.first_t >= self.startup:
                gap = t - e.first_t
                ev = {"seconds_without_step": gap, "threshold_s": self.startup, "last_step": None}
                msg = f"no training step {fmt(gap)} s after the run started (records still arrive)"
                self.tr.fire(None, WARNING, "No step yet", msg, ev, t=t, refresh=True)
            return
        gap = t - ref
        if gap >= self.thresholds()[0]:
            self._fire(e, e.last_step, gap, t, resumed=False)

    def _fire(
        self, e: EngineState, prev_step: int | None, gap: float, t: float, resumed: bool
    ) -> None:
        warn, crit = self.thresholds()
        sev: Severity = CRITICAL if gap >= crit else WARNING
        p95 = self.intervals.quantile
        ev: dict[str, Any] = {
            "seconds_without_step": gap,
            "last_step": prev_step,
            "step_time_p95": p95,
            "warn_s": warn,
            "critical_s": crit,
            "resumed": resumed,
        }
        how = "then training resumed" if resumed else "records still arrive"
        msg = (
            f"no new step for {fmt(gap)} s after step {prev_step} ({how}); threshold {fmt(warn)} s"
        )
        if not resumed and e.where is not None:
            # where the loop waits, from the probe's heartbeats (data_wait, backward...)
            ev["phase"] = e.where
            if e.where_since is not None:
                ev["phase_since"] = e.where_since
                msg = f"stuck in {e.where} for {fmt(max(0.0, t - e.where_since))} s; " + msg
            else:
                msg = f"stuck in {e.where}; " + msg
        if p95:
            msg += f" = max({fmt(self.wf)}x p95 step time {fmt(p95)} s, {fmt(self.wfloor)} s)"
        a = self.tr.fire(prev_step, sev, "Training stalled", msg, ev, t=t, refresh=True)
        if resumed and a.severity == CRITICAL:
            # critical while the run waits (it is wasting its compute now); once the steps
            # come back it is history worth a look: a warning, in replay and live alike
            a = self.tr.revise(severity=WARNING) or a
        if resumed and not self.clock_seen:
            # a log with no heartbeat ever (another tool's, TensorBoard's wall times): the
            # gap between two records may be a hang, an evaluation, a checkpoint or a
            # resume on another day; nothing says which
            note = "; this log has no heartbeats: a hang, an evaluation and a pause look the same"
            message = a.message if "no heartbeats" in a.message else a.message + note
            a = self.tr.revise(severity=INFO, title="Gap between steps", message=message) or a
        self.phase_alert = False
        if resumed and prev_step is not None and prev_step == self.last_eval_step:
            self._explain(a)

    def _fire_phase(self, e: EngineState, took: float, t: float) -> Alert:
        """A declared phase has lasted past its cap: a hang inside eval/checkpoint."""
        warn, crit = self.phase_thresholds()
        sev: Severity = CRITICAL if took >= crit else WARNING
        p95 = self.intervals.quantile
        since = e.last_step_t
        ev = {
            "phase": e.phase_name,
            "seconds_in_phase": took,
            "seconds_without_step": t - since if since is not None else took,
            "last_step": e.last_step,
            "step_time_p95": p95,
            "warn_s": warn,
            "critical_s": crit,
            "resumed": False,
        }
        msg = (
            f"in phase '{e.phase_name}' for {fmt(took)} s after step {e.last_step} (records "
            f"still arrive); a declared phase pauses the stall watch up to {fmt(warn)} s"
        )
        if p95:
            msg += f" = max({fmt(self.cf)}x p95 step time {fmt(p95)} s, {fmt(self.phase_floor)} s)"
        title = f"Stalled in phase '{e.phase_name}'"
        a = self.tr.fire(e.last_step, sev, title, msg, ev, t=t, refresh=True)
        self.phase_alert = True
        return a


def _monotonic_gap(gap: float, rec: Record) -> float:
    """The time between two steps: the gap of their wall-clock stamps ``t``, unless the
    later step's ``step_time`` (the probe measures it on a monotonic clock, from the end of
    the previous step) says less passed: then the wall clock jumped and ``step_time`` is
    the truth. Logs without ``step_time`` (other tools) keep the wall-clock gap."""
    st = rec.get("step_time")
    if (type(st) is float or type(st) is int) and 0 <= st < gap:
        return float(st)
    return gap
