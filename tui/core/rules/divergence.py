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
its gradients are exactly 0 on many steps).
"""

from __future__ import annotations

import math
from collections import deque
from operator import sub
from typing import TYPE_CHECKING, Any

from ....probe.schema import EV_EXIT
from ..alerts import CRITICAL, INFO, WARNING, Severity
from ..fmt import number as fmt
from .base import Rule, Tracker, held_steps
from .window import median_of

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block


TINY_LOG = math.log(1e-6)  # below this a loss is float noise: no early blow-up from there
EARLY_KNOWN = 8  # losses before a rise that tell the start's noise well enough for two in a row
EARLY_SIGMAS = 3.5  # an early blow-up also clears this many sigmas of the start's own noise
WINDOW_STEPS = 20  # the early median's window, in steps (and at least WINDOW_LOSSES losses)
WINDOW_LOSSES = 20  # losses its noise is measured from (fewer misjudge it, both ways)
WINDOW_SIGMAS = 3.0  # its median clears this many sigmas of the window's own log noise
CRITICAL_SIGMAS = 4.0  # ... and this many for a critical (one first loss is one noisy draw)
EARLY_WARN = 4.0  # a window median this many times the start: a warning (critical: early_ratio)
NEVER_MIN = 10  # losses a "never came down" verdict needs
NEVER_K = 5  # ... compared in stretches of this many
NEVER_GAIN = 0.1  # ... with no stretch of 5 losses this much below the first 5
NEVER_SPREAD = 0.5  # ... and a log-spread of the losses this wide (values swinging ~1.6x)
NEVER_ZERO_GRADS = 0.2  # ... or grad norms exactly 0 on this share of the steps
LOST_FOR_CRITICAL = 0.5  # a divergence is critical once it gave back this share of progress


def log_spread_of(logs: list[float]) -> float:
    """Robust sigma of already sorted log values, from their 16th/84th percentiles."""
    n = len(logs)
    return 0.5 * (logs[int(0.84 * (n - 1))] - logs[int(0.16 * (n - 1))]) if n >= 5 else 0.0


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
        self.early_from: int | None = None  # the first step early() saw
        self.early_n = 0  # losses early() has seen
        self.early_logs: list[float] = []  # log losses of the first steps, before any high
        self.high_from: int | None = None  # first step of the current run of early highs
        self.high_ref: float | None = None  # the reference it was judged against
        self.high_n = 0  # losses in the current run of early highs
        self.high_bar = 0.0  # ... and the log loss it had to reach (median + noise)
        self.blown_from: float | None = None  # an early blow-up's reference: where the run started
        self.first_losses: list[float] = []  # the first few losses: where the run started
        self.window: deque[tuple[int, float]] = deque(maxlen=64)  # the early median's window
        self.median_open = self.on and self.early_steps > 0
        self.median_seen = 0  # losses the early median has taken
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
        self.spread_at_min = 0.0
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

    def _take(self, e: EngineState, b: Block) -> None:
        """The block's losses into the run's sample, the first losses and the early window;
        the early median judged (the block ends before the figures take it)."""
        for x in b.gn:
            if x is not None:
                self.grads += 1
                self.zero_grads += x == 0.0
        for step, x in zip(b.steps, b.loss, strict=True):
            if x is None or x <= 0:
                continue
            self.taken += 1
            if self.taken % self.stride == 0:
                self.sample.append(x)
                if len(self.sample) >= 2048:
                    del self.sample[1::2]
                    self.stride *= 2
            if len(self.first_losses) < 3:
                self.first_losses.append(x)
            elif self.median_open and not e.segments.watching and e.segments.mixed is None:
                # not while a second run in the file may be a second writer (as ``early``)
                self.window.append((step, x))
                self.median_seen += 1
                self._early_median(e, step)

    def _early_median(self, e: EngineState, step: int) -> None:
        """The loss jumped at once and bounces far above where it started (3.5 -> 23 in two
        steps, then 8-40 for 100 steps: never two in a row at 5x, so ``_early`` misses it).

        Within the first ``early_steps`` steps: the median of the last ``WINDOW_STEPS``
        steps' losses (at least ``WINDOW_LOSSES``) against the start (the first loss, or
        the median of the first three when lower), clearing ``EARLY_WARN`` (3) times it
        and ``WINDOW_SIGMAS`` of the window's own log noise (a noisy window's median says
        less). A warning; critical at ``early_ratio`` (5x) and beyond the noise."""
        first = self.first_losses
        s0 = self.early_from if self.early_from is not None else e.first_step
        w = self.window
        # the first early_steps steps, or the first 2 windows' worth of losses of a log
        # written every N steps (in steps, and never more records than that)
        if s0 is not None and step - s0 > self.early_steps and self.median_seen > 2 * WINDOW_LOSSES:
            self.median_open = False
            self.window.clear()
            return
        while len(w) > WINDOW_LOSSES and step - w[0][0] >= WINDOW_STEPS:
            w.popleft()
        if len(w) < WINDOW_LOSSES:
            return
        ref = min(first[0], median_of(first) or first[0])
        if ref <= 0 or math.log(ref) < TINY_LOG:
            return
        logs = sorted(math.log(x) for _, x in w)
        mid = logs[len(logs) // 2]
        # the larger of a robust and a plain estimate: ten losses misjudge either one, and
        # a sigma read too small turns a low first draw of a noisy run into a "blow-up"
        mean = sum(logs) / len(logs)
        sd = (sum((v - mean) ** 2 for v in logs) / (len(logs) - 1)) ** 0.5
        sigma = max(1.4826 * sorted(abs(v - mid) for v in logs)[len(logs) // 2], sd)
        ratio = math.exp(mid) / ref
        bar = max(EARLY_WARN, math.exp(WINDOW_SIGMAS * sigma))
        if ratio < bar:
            return
        crit = ratio >= max(math.exp(self.log_early), math.exp(CRITICAL_SIGMAS * sigma))
        sev: Severity = CRITICAL if crit else WARNING
        a = self.tr.alert
        if a is not None and a.active and (a.severity == CRITICAL or not crit):
            self.tr.hold(step)
            return
        onset = w[0][0]
        ev = {
            "loss_median": math.exp(mid),
            "loss_before": ref,
            "ratio": ratio,
            "onset_step": onset,
            "threshold_ratio": bar,
            "window_steps": w[-1][0] - w[0][0] + 1,
            "lr": e.lr,
        }
        msg = (
            f"the loss's median over steps {onset}-{step} is {fmt(math.exp(mid))}, "
            f"{fmt(ratio)}x the {fmt(ref)} it started at"
        )
        if e.lr is not None:
            msg += f"; lr {fmt(e.lr)}: likely far too high"
        self.tr.fire(onset, sev, "Loss blew up in the first steps", msg, ev, t=e.t, refresh=True)
        self.blown_from = ref
        self.tr.hold(step)

    def on_event(self, e: EngineState, rec: dict[str, Any]) -> None:
        if rec.get("type") == EV_EXIT and rec.get("status") == "ok":
            self._never_came_down(e)

    def on_finish(self, e: EngineState) -> None:
        self._never_came_down(e)

    def _never_came_down(self, e: EngineState) -> None:
        """The log begins after the blow-up (another tool's, logged every N steps): no
        rise to see, only a loss that never comes down. When the run is over: no stretch
        of ``NEVER_K`` losses ``NEVER_GAIN`` below the first ones, while the losses
        swing wildly (a log-spread of ``NEVER_SPREAD``: a run stuck at chance is calm) or
        the grad norm is exactly 0 on many steps (dead units after the blow-up). A
        warning naming the lr: a plateau says "not learning", this says why."""
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
        xs = self.sample
        if len(xs) < NEVER_MIN:
            return
        k = NEVER_K
        start = median_of(xs[:k]) or 0.0
        best = min(median_of(xs[i : i + k]) or math.inf for i in range(0, len(xs) - k + 1))
        if start <= 0 or best < start * (1 - NEVER_GAIN):
            return
        logs = sorted(math.log(x) for x in xs)
        spread = log_spread_of(logs)
        zeros = self.zero_grads / self.grads if self.grads else 0.0
        if spread < NEVER_SPREAD and zeros < NEVER_ZERO_GRADS:
            return
        ev = {
            "loss_first": start,
            "loss_best": best,
            "loss_median": math.exp(logs[len(logs) // 2]),
            "log_spread": spread,
            "zero_grad_share": zeros,
            "losses": len(xs),
            "lr": e.lr,
            "lr_max": e.lr_max,
        }
        why = []
        if spread >= NEVER_SPREAD:
            why.append(f"it swings {fmt(math.exp(spread))}x around its median")
        if zeros >= NEVER_ZERO_GRADS:
            why.append(f"the grad norm is exactly 0 on {fmt(100 * zeros)} % of the steps")
        msg = (
            f"the loss never came down: {fmt(start)} at the start, no stretch of the run "
            f"{fmt(100 * NEVER_GAIN)} % below it (best {fmt(best)}), and {' and '.join(why)}"
        )
        if e.lr_max is not None:
            msg += f"; lr up to {fmt(e.lr_max)}: likely far too high from the start"
        first = e.first_step
        self.tr.fire(first, WARNING, "Loss never came down", msg, ev, t=e.t)
        self.tr.hold(e.last_step)

    def close_early(self) -> None:
        """No more early watch (the rules stop: two writers share the log); its list of
        losses is let go."""
        self.early_open = False
        self.early_logs = []

    def early(self, e: EngineState, step: int, loss: float) -> None:
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
        # not while a second run in the file may be a second writer: two interleaved
        # trainings at different levels look like a blow-up on every switch (the record
        # still counts above, so a log that keeps repeating its step closes the watch)
        if not e.segments.watching:
            self._early(e, step, loss, math.log(loss))

    def _early(self, e: EngineState, step: int, loss: float, x: float) -> None:
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
        if e.lr is not None:
            msg += f"; lr {fmt(e.lr)}: likely far too high"
        self.tr.fire(self.high_from, CRITICAL, "Loss blew up in the first steps", msg, ev, t=e.t)
        self.blown_from = math.exp(ref)
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
            + f"; back below the line from step {step} (smoothed {fmt(math.exp(ema))})",
        )

    def _judge(self, e: EngineState, step: int, ema: float, line: float) -> None:
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
                start = self.blown_from
                if start is not None and ema >= math.log(start * EARLY_WARN):
                    # an early blow-up is judged against where the run started, not the
                    # baseline it set after the jump: still far above the start, still up
                    self.below = 0
                elif below >= self.persist:
                    self._recovered(step, ema)
                    self.tr.clear(step)
