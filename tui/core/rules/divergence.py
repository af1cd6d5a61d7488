"""Divergence: the smoothed loss climbs well above its best level and stays there, and
the early blow-up that comes before any window exists.

Split from ``spikes.py``: a spike is one step against its window; divergence is a
level against a baseline, judged over steps (see ``Divergence``'s docstring).
"""

from __future__ import annotations

import math
from collections import deque
from operator import sub
from typing import TYPE_CHECKING

from dltop.tui.core.alerts import CRITICAL, WARNING, Severity
from dltop.tui.core.fmt import number as fmt
from dltop.tui.core.rules.base import Rule, Tracker, held_steps
from dltop.tui.core.rules.window import median_of

if TYPE_CHECKING:
    from dltop.tui.core.rules.engine import RuleEngine
    from dltop.tui.core.rules.window import Block


TINY_LOG = math.log(1e-6)  # below this a loss is float noise: no early blow-up from there
EARLY_KNOWN = 8  # losses before a rise that tell the start's noise well enough for two in a row
EARLY_SIGMAS = 3.5  # an early blow-up also clears this many sigmas of the start's own noise


def _step_noise(logs: list[float]) -> float:
    """Robust sigma of log(loss) from step-to-step differences (0 with fewer than 4 losses):
    the median |difference| of two independent draws is 0.954 sigma."""
    if len(logs) < 4:
        return 0.0
    d = sorted(map(abs, map(sub, logs[1:], logs)))  # |logs[i+1] - logs[i]|
    return d[len(d) // 2] / 0.954


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

    def __init__(self, engine: RuleEngine) -> None:
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
        self.early_from: int | None = None  # the first step early() saw
        self.early_n = 0  # losses early() has seen
        self.early_logs: list[float] = []  # log losses of the first steps, before any high
        self.high_from: int | None = None  # first step of the current run of early highs
        self.high_ref: float | None = None  # the reference it was judged against
        self.high_n = 0  # losses in the current run of early highs
        self.high_bar = 0.0  # ... and the log loss it had to reach (median + noise)
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
        self.spread_at_min = 0.0
        self.diffs_src: deque[float] = deque(maxlen=101)  # the last log losses (noise)

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: RuleEngine, b: Block) -> None:
        if not self.on or self.nonpositive:
            return
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
                self.spread_at_min = _step_noise(list(self.diffs_src)) or fig.loss_spread
        a = self.alpha
        dense = max(self.log_ratio, self.noise_sigmas * self.noise_gain * self.spread_at_min)
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
            if gap == 1 or gap <= 0:
                a_eff, line = a, dense
            else:
                # a log written every `gap` steps: the smoother runs in steps, not records
                # (each record already averages its steps in HF / Lightning logs)
                a_eff = 1.0 - (1.0 - a) ** min(gap, 10_000)
                gain = math.sqrt(a_eff / (2.0 - a_eff))
                line = max(self.log_ratio, self.noise_sigmas * gain * self.spread_at_min)
            ema = x if ema is None else ema + a_eff * (x - ema)
            seen += 1
            if first_step is None:
                first_step = step
            if (
                base is not None
                and (seen > warmup or (seen >= 3 and step - first_step > warmup))
                and (ema - base >= line or run_or_active)
            ):
                self.ema, self.ema_step, self.seen, self.first_step = (
                    ema,
                    ema_step,
                    seen,
                    first_step,
                )
                self._judge(e, step, ema, line)
                run_or_active = bool(self.run) or self.tr.active
        self.ema, self.ema_step, self.seen, self.first_step = ema, ema_step, seen, first_step

    def early(self, e: RuleEngine, step: int, loss: float) -> None:
        """Called by the engine on each of the first ``early_steps`` finite losses, on the
        step itself (not at the block's end): a blow-up is named as it happens."""
        if loss <= 0 or not self.on:
            self.early_open = False
            return
        if self.early_from is None:
            self.early_from = step
        self.early_n += 1
        # in steps (a log written every 50 steps is past its start after one record), and
        # never more than early_steps records: a log whose step number never advances must
        # not keep this watch, and its list of losses, open
        if step - self.early_from >= self.early_steps or self.early_n > self.early_steps:
            self.early_open = False
            return
        self._early(e, step, loss, math.log(loss))

    def _early(self, e: RuleEngine, step: int, loss: float, x: float) -> None:
        """A blow-up in the first steps, before any window or baseline exists: the commonest
        "lr too high" story (2.3 -> 6 -> 34 in three steps, then the model sits at chance).

        Named on its step: finite losses in a row at ``early_ratio`` (5) x where the run
        started (the first loss, or the median of the losses so far when that is lower: a
        ramp 2.3 -> 6 -> 34 must not raise its own reference), and ``EARLY_SIGMAS``
        step-to-step noise above it once there are a few losses. Two in a row (three before
        the start's noise is known), because one batch can be 5x off on a noisy start,
        several in a row rarely are.
        """
        before = self.early_logs
        if not before:
            before.append(x)
            return
        if self.high_from is None:
            med = median_of(before)
            self.high_ref = before[0] if med is None or before[0] < med else med
            # the noise bar stands on the median: a low first draw must not lower it
            self.high_bar = (med or 0.0) + EARLY_SIGMAS * _step_noise(before)
        ref = self.high_ref
        # a loss at float precision (1e-10, a model that already fits) has no ratio scale
        if ref is None or ref < TINY_LOG or x - ref < self.log_early or x < self.high_bar:
            self.high_from = None
            before.append(x)
            return
        if self.high_from is None:
            self.high_from = step
            self.high_n = 0
        self.high_n += 1
        # two in a row once the start's noise is known (8 losses before the rise), three
        # while it is not: a low first draw on a noisy start must not read as a blow-up
        if self.high_n < (2 if len(before) >= EARLY_KNOWN else 3):
            return
        if self.tr.active:
            self.tr.hold(step)
            return
        r = math.exp(x - ref)
        ev = {
            "loss": loss,
            "loss_before": math.exp(ref),
            "ratio": r,
            "onset_step": self.high_from,
            "threshold_ratio": max(math.exp(self.log_early), math.exp(self.high_bar - ref)),
            "lr": e.lr,
        }
        msg = (
            f"the loss went from {fmt(math.exp(ref))} to {fmt(loss)} ({fmt(r)}x) by step "
            f"{step}, within the first {self.early_steps} steps"
        )
        self.tr.fire(self.high_from, CRITICAL, "Loss blew up in the first steps", msg, ev, t=e.t)
        self.tr.hold(step)

    def _judge(self, e: RuleEngine, step: int, ema: float, line: float) -> None:
        lo = self.base if self.base is not None else ema
        level, low = math.exp(ema), math.exp(lo)
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
                sev: Severity = CRITICAL if ema - lo >= max(self.log_crit, line) else WARNING
                ev = {
                    "loss_smoothed": level,
                    "loss_smoothed_min": low,
                    "min_step": self.min_step,
                    "ratio": r,
                    "threshold_ratio": math.exp(line),
                    "steps_above": held,
                    "loss_first": first,
                    "lr": e.lr,
                }
                msg = (
                    f"smoothed loss {fmt(level)} = {fmt(r)}x its best median level {fmt(low)} (step {self.min_step}), "
                    f"above {fmt(math.exp(line))}x for {held} steps"
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
                if below >= self.persist:
                    self.tr.clear(step)
