"""Divergence: the smoothed loss climbs well above its best level and stays there, and
the early blow-up that comes before any window exists.

Split from ``spikes.py``: a spike is one step against its window; divergence is a
level against a baseline, judged over steps (see ``Divergence``'s docstring).

The commonest failure of all, an lr far too high from the start, has three shapes here:
the loss runs away in consecutive steps (``_early``, on its step); it jumps at once and
then bounces far above where it started (``_early_median``: the median of a window of
steps against the first losses, beyond that window's own noise); or the log begins
after the jump and the loss never comes down at all (``_never_came_down``, judged when
the run is over: no stretch of it below its first losses, while it swings wildly or
its gradients are exactly 0 on many steps). The first steps' watch and these verdicts'
arithmetic and wording are in ``blowup.py``; this rule raises them.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from ....probe.schema import EV_EXIT, Record
from ..text.fmt import number as fmt
from .alerts import CRITICAL, INFO, WARNING, Severity
from .base import Rule, Tracker, held_steps
from .blowup import EARLY_WARN, EarlyWatch, never_came_down, step_noise
from .window import exp_or_inf, present, take_every

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block


LOST_FOR_CRITICAL = 0.5  # a divergence is critical once it gave back this share of progress


class Divergence(Rule):
    """The smoothed loss climbs well above its typical best level and stays there.

    Smoothing is an EMA of log(loss): a geometric mean, so that one huge batch loss cannot
    drag the level up on its own, and the ratio tests read as differences. The baseline it
    is compared with is the lowest *median* the loss window has had (the median of the
    last ``loss_spike.window`` finite losses, looked at once per block), never the minimum
    of the smoothed curve itself: on a noisy run (small batches, recurrent nets) that
    minimum is a noise dip far below where the loss really sits, and a later noise peak of
    the same curve then reads as a 5x "divergence". The rise must also clear
    ``noise_sigmas`` times the EMA's own noise (from the window's log spread when the
    baseline was set). Losses that go to zero or below (some likelihoods) have no ratio
    scale: the rule stands down for them.
    """

    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("divergence")
        self.alpha = 2.0 / (max(1, int(c["span"])) + 1.0)
        self.noise_gain = math.sqrt(self.alpha / (2.0 - self.alpha))
        self.log_ratio = math.log(max(1.0 + 1e-9, float(c["ratio"])))
        self.log_crit = math.log(max(1.0 + 1e-9, float(c["critical_ratio"])))
        self.noise_sigmas = float(c["noise_sigmas"])
        self.persist = max(1, int(c["persist"]))
        self.lost = float(c["progress_lost"])
        self.warmup = int(c["warmup_steps"])
        self.baseline_samples = max(1, int(c["baseline_samples"]))
        self.early_steps = int(c["early_steps"])
        self.log_early = math.log(max(1.0 + 1e-9, float(c["early_ratio"])))
        self.early_open = self.on and self.early_steps > 0  # the engine calls early() while set
        self.watch = EarlyWatch(self.early_steps, self.log_early, self.on)  # the first steps
        self.blown_from: float | None = None  # an early blow-up's reference: where the run started
        # the whole run, sampled evenly: "never came down" (judged when it is over)
        self.sample: list[float] = []
        self.stride = 1
        self.taken = 0
        self.grads = 0
        self.zero_grads = 0
        self.ended = False
        self.tr = Tracker(engine, "divergence")
        self.ema: float | None = None  # of log(loss)
        self.base: float | None = None  # log of the lowest window median so far
        self.min_step: int | None = None
        self.base_from = 0  # losses seen when the baseline was (re)started
        self.run = 0  # consecutive steps above the line
        self.run_start: int | None = None
        self.below = 0
        self.last_jump: int | None = None
        self.seen = 0
        self.first_step: int | None = None  # the first finite loss's step (warm-up in steps)
        self.ema_step: int | None = None  # the step of the last loss the smoother took
        self.below_from = 0  # the step the current run below the line began
        self.nonpositive = False
        # the noise of one record when the baseline was set; None: not worked out yet
        # (``_noise``: its sort is paid only when a loss nears the line, not at every new
        # low of a falling loss), from ``noise_src`` and ``noise_else`` as they were then
        self.spread_at_min: float | None = 0.0
        self.noise_src: list[float] = []
        self.noise_else = 0.0
        self.diffs_src: deque[float] = deque(maxlen=101)  # the last log losses (noise)

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, b: Block) -> None:
        if not self.on or self.nonpositive:
            return
        self._take(e, b)
        fig = e.fig
        if e.lr_jump_step is not None and e.lr_jump_step != self.last_jump:
            self.last_jump = e.lr_jump_step
            if e.lr_prev is not None and e.lr is not None and e.lr > e.lr_prev:
                # a schedule raised lr: a new baseline, from medians of the new part only
                self.base = None
                self.base_from = fig.loss_seen
        # the window's median as of the previous block (the figures are pushed after the
        # rules): the baseline is its lowest value, once the window holds enough losses
        # that came after the last restart of the baseline
        med = fig.loss_med
        if (
            med is not None
            and med > 0
            and fig.loss_seen - self.base_from
            >= min(self.baseline_samples, fig.loss_win.maxlen or 1)
        ):
            lm = math.log(med)
            if self.base is None or lm < self.base:
                self.base, self.min_step = lm, (b.steps[0] if b.steps else e.step)
                # the noise allowance is fixed when the baseline is set (a loss that is
                # running away widens its own window and must not raise its bar), and is the
                # noise of one record, from record-to-record differences: the window's
                # spread would also hold the trend (a sparse log's 100 records can span
                # the whole early descent), the differences hold only the noise
                self.spread_at_min = None
                self.noise_src = list(self.diffs_src)
                self.noise_else = fig.loss_spread
        a = self.alpha
        # the line a loss must cross is at least ``log_ratio`` (the noise allowance only
        # raises it): below that no loss needs the allowance, whose sort is paid only then
        floor = self.log_ratio
        dense: float | None = None
        log = math.log
        # the per-loss state in locals, written back before anything that may read it (a
        # judgement, the return on a non-positive loss, the end): this loop runs for every
        # finite loss. `run` and the tracker's state change only in _judge.
        ema, ema_step, seen, first_step = self.ema, self.ema_step, self.seen, self.first_step
        base, warmup, append = self.base, self.warmup, self.diffs_src.append
        run_or_active = bool(self.run) or self.tr.active
        for step, loss in zip(b.steps, b.loss, strict=True):
            if loss is None:
                continue
            if loss <= 0:
                self.nonpositive = True
                break
            x = log(loss)
            append(x)
            gap = step - ema_step if ema_step is not None else 1
            ema_step = step
            # a log written every `gap` steps: the smoother runs in steps, not records
            # (each record already averages its steps in HF / Lightning logs)
            each = gap == 1 or gap <= 0
            a_eff = a if each else 1.0 - (1.0 - a) ** min(gap, 10_000)
            ema = x if ema is None else ema + a_eff * (x - ema)
            seen += 1
            if first_step is None:
                first_step = step
            if (
                base is not None
                and (seen > warmup or (seen >= 3 and step - first_step > warmup))
                and (ema - base >= floor or run_or_active)
            ):
                if each:
                    if dense is None:
                        dense = max(floor, self.noise_sigmas * self.noise_gain * self._noise())
                    line = dense
                else:
                    gain = math.sqrt(a_eff / (2.0 - a_eff))
                    line = max(floor, self.noise_sigmas * gain * self._noise())
                if ema - base < line and not run_or_active:
                    continue
                self.ema, self.ema_step, self.seen, self.first_step = (
                    ema,
                    ema_step,
                    seen,
                    first_step,
                )
                self._judge(e, step, ema, line)
                run_or_active = bool(self.run) or self.tr.active
        self.ema, self.ema_step, self.seen, self.first_step = ema, ema_step, seen, first_step

    def _noise(self) -> float:
        """The noise of one record as of the baseline, worked out the first time it is
        needed (the same value as at the baseline: from the losses kept then)."""
        spread = self.spread_at_min
        if spread is None:
            spread = self.spread_at_min = step_noise(self.noise_src) or self.noise_else
            self.noise_src = []
        return spread

    def _take(self, e: EngineState, b: Block) -> None:
        """The block's losses into the run's sample, the first losses and the early window;
        the early median judged (the block ends before the figures take it)."""
        gns = present(b.gn)
        if gns:
            self.grads += len(gns)
            self.zero_grads += gns.count(0.0)  # x == 0.0 (-0.0 too; no NaN: kept as None)
        watch = self.watch
        if len(watch.first) >= 3 and not watch.median_open:
            # the early watch is over: the sample is all that is left to take
            xs = present(b.loss)
            if xs and min(xs) <= 0:
                xs = [x for x in xs if x > 0]
            self.taken, self.stride = take_every(
                self.sample, len(xs), xs.__getitem__, self.taken, self.stride, 2048
            )
            return
        for step, x in zip(b.steps, b.loss, strict=True):
            if x is None or x <= 0:
                continue
            self.taken += 1
            if self.taken % self.stride == 0:
                self.sample.append(x)
                if len(self.sample) >= 2048:
                    del self.sample[1::2]
                    self.stride *= 2
            if len(watch.first) < 3:
                watch.first.append(x)
            elif watch.median_open and not e.segments.watching and e.segments.mixed is None:
                # not while a second run in the file may be a second writer (as ``early``)
                self._early_median(e, step, x)

    def _early_median(self, e: EngineState, step: int, x: float) -> None:
        """The loss jumped at once and bounces far above where it started (3.5 -> 23 in two
        steps, then 8-40 for 100 steps: never two in a row at 5x, so ``_early`` misses it):
        the median of a window of steps against the first losses (``EarlyWatch.median``)."""
        found = self.watch.median(step, x, e.first_step, e.lr)
        if found is None:
            return
        ref, sev, ev, msg = found
        a = self.tr.alert
        if a is not None and a.active and (a.severity == CRITICAL or sev != CRITICAL):
            self.tr.hold(step)
            return
        onset = self.watch.window[0][0]
        self.tr.fire(onset, sev, "Loss blew up in the first steps", msg, ev, t=e.t, refresh=True)
        self.blown_from = ref
        self.tr.hold(step)

    def on_event(self, e: EngineState, rec: Record) -> None:
        if rec.get("type") == EV_EXIT and rec.get("status") == "ok":
            self._never_came_down(e)

    def on_finish(self, e: EngineState) -> None:
        self._never_came_down(e)

    def _never_came_down(self, e: EngineState) -> None:
        """The log begins after the blow-up: judged once, when the run is over, from the
        run's sampled losses and zero grad norms (``blowup.never_came_down``)."""
        if (
            self.ended
            or not self.on
            or self.nonpositive
            or self.tr.alert is not None
            or e.segments.mixed is not None  # two writers: their losses are not one run's
        ):
            self.ended = True
            return
        self.ended = True
        found = never_came_down(self.sample, self.grads, self.zero_grads, e.lr, e.lr_max)
        if found is None:
            return
        ev, msg = found
        self.tr.fire(e.first_step, WARNING, "Loss never came down", msg, ev, t=e.t)
        self.tr.hold(e.last_step)

    def close_early(self) -> None:
        """No more early watch (the rules stop: two writers share the log); its list of
        losses is let go."""
        self.early_open = False
        self.watch.logs = []

    def early(self, e: EngineState, step: int, loss: float) -> None:
        """Called by the engine on each of the first ``early_steps`` finite losses, on the
        step itself (not at the block's end): a blow-up is named as it happens."""
        if loss <= 0 or not self.on or not self.watch.count(step):
            self.early_open = False
        elif not e.segments.watching:
            # not while a second run in the file may be a second writer: two interleaved
            # trainings at different levels look like a blow-up on every switch (the record
            # still counts above, so a log that keeps repeating its step closes the watch)
            self._early(e, step, loss, math.log(loss))

    def _early(self, e: EngineState, step: int, loss: float, x: float) -> None:
        """A blow-up in the first steps, before any window or baseline exists: losses in a
        row far above where the run started (``EarlyWatch.high``), named on its step."""
        ref = self.watch.high(step, x)
        if ref is None:
            return
        if self.tr.active:
            self.tr.hold(step)
            return
        ev, msg = self.watch.high_finding(loss, x, ref, step, e.lr)
        onset = self.watch.high_from
        self.tr.fire(onset, CRITICAL, "Loss blew up in the first steps", msg, ev, t=e.t)
        self.blown_from = exp_or_inf(ref)
        self.tr.hold(step)

    def _recovered(self, step: int, ema: float) -> None:
        """The smoothed loss came back below the line and stayed there: the rise was
        absorbed (a curriculum that made the task harder, an RL policy change, a warm
        restart's bump). The severity policy: one step down, a warning to information, a
        critical to a warning (it was wasting compute while it lasted). Not an early
        blow-up: a run that came back from one still lost its start."""
        a = self.tr.alert
        if a is None or a.evidence.get("recovered_at") is not None or "early" in a.title.lower():
            return
        if a.title.startswith("Loss blew up") or a.title.startswith("Loss never"):
            return
        self.tr.revise(
            {"recovered_at": step},
            severity=INFO if a.severity == WARNING else WARNING,
            title="Loss rose, then recovered",
            message=a.message
            + f"; back below the line from step {step} (smoothed {fmt(exp_or_inf(ema))})",
        )

    def _judge(self, e: EngineState, step: int, ema: float, line: float) -> None:
        lo = self.base if self.base is not None else ema
        level, low = exp_or_inf(ema), exp_or_inf(lo)
        first = (
            e.fig.loss_first
            if e.fig.loss_first is not None
            else (e.fig.loss_first_vals or [level])[0]
        )
        # and it has given back a real share of the progress made (a run at 1e-4 that
        # wobbles to 3e-4 has lost nothing that matters)
        diverging = ema - lo >= line and level - low >= self.lost * max(first - low, 0.0)
        if diverging:
            if self.run == 0:
                self.run_start = step
            self.run += 1
            self.below = 0
            # for `persist` steps, not records: two records of a sparse log that span them
            held = held_steps(self.run, self.run_start, step)
            if held >= self.persist:
                r = level / low
                # critical: far above its best and most of what it learned given back (a
                # self-supervised loss that rises 20x from a near-zero warm-up level but stays
                # far below its start is worth a look, not wasting the compute now)
                lost = level - low >= LOST_FOR_CRITICAL * max(first - low, 0.0)
                sev: Severity = (
                    CRITICAL if ema - lo >= max(self.log_crit, line) and lost else WARNING
                )
                ev = {
                    "loss_smoothed": level,
                    "loss_smoothed_min": low,
                    "min_step": self.min_step,
                    "ratio": r,
                    "threshold_ratio": exp_or_inf(line),
                    "steps_above": held,
                    "loss_first": first,
                    "lr": e.lr,
                }
                msg = (
                    f"smoothed loss {fmt(level)} = {fmt(r)}x its best median level {fmt(low)} (step {self.min_step}), "
                    f"above {fmt(exp_or_inf(line))}x for {held} steps"
                )
                refresh = sev == CRITICAL or not self.tr.active
                self.tr.fire(
                    self.run_start, sev, "Loss is diverging", msg, ev, t=e.t, refresh=refresh
                )
                self.tr.hold(step)
        else:
            self.run = 0
            if self.tr.active:
                if self.below == 0:
                    self.below_from = step
                self.below += 1
                below = held_steps(self.below, self.below_from, step)
                start = self.blown_from
                if start is not None and ema >= math.log(start * EARLY_WARN):
                    # an early blow-up is judged against where the run started, not the
                    # baseline it set after the jump: still far above the start, still up
                    self.below = 0
                elif below >= self.persist:
                    self._recovered(step, ema)
                    self.tr.clear(step)
