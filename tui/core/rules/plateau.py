"""Is the run still learning? A loss plateau, judged on window medians in steps.

A plateau after the loss has already fallen a long way is usually convergence, not a
fault: it is reported as information; only a run stuck near its starting loss gets a
warning.

A run too short for the windows (a fine-tune logged a dozen times, a 60-step smoke run)
is judged once, when it ends cleanly: thirds of its losses, not windows.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from dltop.probe.schema import EV_EXIT
from dltop.tui.core.alerts import INFO, WARNING, Severity
from dltop.tui.core.fmt import number as fmt
from dltop.tui.core.rules.base import Rule, Tracker
from dltop.tui.core.rules.window import falling_z, finite_losses, median_of

if TYPE_CHECKING:
    from dltop.tui.core.rules.engine import RuleEngine
    from dltop.tui.core.rules.window import Block


MIN_WINDOW_LOSSES = 5  # losses a plateau window needs, however many steps it spans
SHORT_RUN_LOSSES = (8, 256)  # a run judged whole at its end: at least 8 losses, under 256
# a short run "got better" only when its thirds fall by this many standard deviations of a
# rank test as well as by min_improvement in median: the best of many noisy stretches is
# 1 % lower by luck alone
NOISE_Z = 2.0
# losses per third from which the rank test can tell: a fall within the first third, then
# flat, with no overlap at all reaches z 2.0 with thirds of 3, 3.4 with thirds of 8
RANKED_THIRD = 8


def warming_up(lr0: float | None, lr1: float | None, lr_max: float | None) -> bool:
    """The lr rose from ``lr0`` to ``lr1`` and ``lr1`` is the highest it has been: a warm-up
    still going. A schedule that warmed up from 0 and has decayed since is past it."""
    if lr0 is None or lr1 is None or not lr1 > 1.2 * lr0:
        return False
    return lr_max is None or lr1 >= 0.999 * lr_max


class Plateau(Rule):
    def __init__(self, engine: RuleEngine) -> None:
        super().__init__(engine)
        c = self.settings("plateau")
        self.window = max(2, int(c["window"]))
        self.frac = float(c["window_frac"])
        self.windows = max(1, int(c["windows"]))
        self.min_imp = float(c["min_improvement"])
        self.stuck = float(c["stuck_progress"])
        self.max_rise = float(c["max_rise"])
        self.span = 0
        self.tr = Tracker(engine, "plateau")
        self.cur: list[float] = []
        self.cur_len = self.window
        self.cur_start = 0  # the current window's first step (set when it opens)
        # closed windows: (median, lr at start, lr at end, first step)
        self.blocks: deque[tuple[float, float | None, float | None, int]] = deque(
            maxlen=self.windows + 1
        )
        self.cur_lr0: float | None = None
        self.seen_jump: int | None = None
        self.first_step: int | None = None
        self.judged = False  # the windows were compared at least once
        self.short: list[float] = []  # the first losses, for a run too short for windows

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: RuleEngine, blk: Block) -> None:
        if not self.on:
            return
        if e.lr_jump_step is not None and e.lr_jump_step != self.seen_jump:
            self.seen_jump = e.lr_jump_step  # a schedule jump: judge the new regime afresh
            self.blocks.clear()
            self.cur = []
        steps, losses = finite_losses(blk)
        if not steps:
            return
        if self.first_step is None:
            self.first_step = steps[0]
        first = self.first_step
        if len(self.short) < SHORT_RUN_LOSSES[1]:
            self.short.extend(losses[: SHORT_RUN_LOSSES[1] - len(self.short)])
        # windows in steps, not records: a window closes once it spans cur_len steps and
        # holds a few losses (a log written every 50 steps fills a 50-step window with one)
        for step, loss in zip(steps, losses, strict=True):
            if not self.cur:
                self.cur_start = step
                self.cur_lr0 = e.lr
                span = min(max(e.steps, step - first + 1), 1 << 62)
                self.cur_len = max(self.window, int(self.frac * span))
            self.cur.append(loss)
            n = len(self.cur)
            if n >= self.cur_len or (
                n >= MIN_WINDOW_LOSSES and step - self.cur_start + 1 >= self.cur_len
            ):
                m = median_of(self.cur) or 0.0
                self.blocks.append((m, self.cur_lr0, e.lr, self.cur_start))
                self.cur = []
                self._judge(e, step)

    def _judge(self, e: RuleEngine, step: int) -> None:
        b = self.blocks
        if len(b) <= self.windows:
            return
        self.judged = True
        lr0, lr1 = b[0][1], b[-1][2]
        if lr1 is not None and lr1 <= 0:
            return  # lr 0: nothing is supposed to move
        if warming_up(lr0, lr1, e.lr_max):
            return  # lr still rising: a warm-up, the loss may wait for it
        meds = [x[0] for x in b]
        base = meds[0]
        # the best of the later windows against the first: a run whose windows went 0.250,
        # 0.238, 0.226, 0.258 is still learning, with one noisy window at the end (a
        # fine-tune from a low loss); a flat run has no later window 1 % better
        gain = (base - min(meds[1:])) / abs(base) if base else 0.0
        now = (base - meds[-1]) / abs(base) if base else 0.0
        # flat: less than min_improvement better over the span, and not rising either
        # (a rising loss is divergence's business, not a plateau)
        first = e.fig.loss_first if e.fig.loss_first is not None else meds[0]
        total = (first - meds[-1]) / abs(first) if first else 0.0
        if -self.max_rise < now and gain < self.min_imp and total > -self.max_rise:
            sev: Severity = WARNING if total < self.stuck else INFO
            # ... unless the eval loss still improves: a run whose logged train loss is
            # noise around a level while its eval loss falls is learning
            eval_gain = e.fig.evals.gain_since(b[0][3])
            learning = eval_gain is not None and eval_gain >= self.min_imp
            if learning:
                sev = INFO
            title = "Loss plateau (not learning)" if sev == WARNING else "Loss plateau"
            span = len(meds) * self.cur_len
            ev = {
                "window": self.cur_len,
                "window_medians": meds,
                "improvement": gain,
                "total_improvement": total,
                "loss_first": first,
                "lr": e.lr,
            }
            if eval_gain is not None:
                ev["eval_improvement"] = eval_gain
            msg = (
                f"median loss {fmt(meds[0])} -> {fmt(meds[-1])} over {len(meds)} windows of "
                f"{self.cur_len} steps ({fmt(100 * gain)} % better, < {fmt(100 * self.min_imp)} %); "
                f"{fmt(100 * total)} % below the starting loss"
            )
            if learning and eval_gain is not None:
                msg += (
                    f"; the eval loss still improved {fmt(100 * eval_gain)} % since step {b[0][3]}"
                )
            a = self.tr.fire(b[0][3], sev, title, msg, ev, t=e.t, refresh=True)
            # the verdict of now: a run that was stuck at its start and has learned since is
            # a plateau after learning (info), not "not learning" any more
            a.severity = sev
            self.tr.hold(step)
            self.span = span
        elif self.tr.active and gain >= self.min_imp:
            self.tr.clear(step)

    def on_event(self, e: RuleEngine, rec: dict[str, Any]) -> None:
        if self.on and rec.get("type") == EV_EXIT and rec.get("status") == "ok":
            self._whole_run(e)

    def _whole_run(self, e: RuleEngine) -> None:
        """A run that ended cleanly before its windows could be compared: "not learning"
        when no third of its losses got ``min_improvement`` below the first third (and the
        eval loss, if logged, did not improve either). Thirds of a dozen noisy losses are
        medians of four: a run that learns moves them; one that sits at chance does not."""
        xs = self.short
        n = len(xs)
        if self.judged or self.tr.alert is not None or self.first_step is None:
            return
        if not SHORT_RUN_LOSSES[0] <= n < SHORT_RUN_LOSSES[1]:
            return
        if e.lr_max is not None and e.lr_max <= 0:
            return  # lr 0 all along: nothing was supposed to move
        if warming_up(e.lr_initial, e.lr, e.lr_max):
            return  # lr still rising at the end: all warm-up, the loss may wait for it
        k = n // 3
        first = median_of(xs[:k]) or 0.0
        if not first:
            return
        thirds = [median_of(xs[i : i + k]) or 0.0 for i in range(k, n - k + 1)]
        last = thirds[-1]
        gain = (first - min(thirds)) / abs(first)
        now = (first - last) / abs(first)
        # the rank test, once the thirds are long enough for it to tell a fall from noise
        z = (
            falling_z([sorted(xs[i : i + k]) for i in (0, k, 2 * k)])
            if k >= RANKED_THIRD
            else NOISE_Z
        )
        if (gain >= self.min_imp and z >= NOISE_Z) or now <= -self.max_rise:
            return  # it learned at some point, or it rose (divergence's business)
        eval_gain = e.fig.evals.gain_since(self.first_step)
        if eval_gain is not None and eval_gain >= self.min_imp:
            return  # the eval loss improved: learning, whatever the logged train loss says
        ev: dict[str, Any] = {
            "losses": n,
            "first_third_median": first,
            "best_third_median": min(thirds),
            "last_third_median": last,
            "improvement": gain,
            "rank_z": z,
            "total_improvement": now,
            "lr": e.lr,
            "whole_run": True,
        }
        if eval_gain is not None:
            ev["eval_improvement"] = eval_gain
        msg = (
            f"the run ended without learning: median loss {fmt(first)} over its first {k} "
            f"logged losses, {fmt(last)} over its last {k}; its best stretch of {k}: "
            f"{_why(gain, z, self.min_imp)} ({n} losses, steps {self.first_step}-{e.last_step})"
        )
        if eval_gain is not None:
            msg += f"; the eval loss moved {fmt(100 * eval_gain)} %"
        self.tr.fire(self.first_step, WARNING, "Loss plateau (not learning)", msg, ev, t=e.t)
        self.tr.hold(e.last_step)


def _why(gain: float, z: float, min_imp: float) -> str:
    """Why a stretch does not count as better: too little, or not clear of the noise."""
    if gain < min_imp:
        return f"{fmt(100 * gain)} % better, < {fmt(100 * min_imp)} %"
    return (
        f"{fmt(100 * gain)} % better, but the thirds show no fall beyond the noise "
        f"(rank test z {fmt(z)} < {fmt(NOISE_Z)})"
    )
