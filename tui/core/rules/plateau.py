"""Is the run still learning? A loss plateau, judged on window medians in steps.

While the run goes on: a plateau after the loss has already fallen a long way may be
convergence, so it is information; a run stuck near its starting loss gets a warning
(and loses it again if it starts learning: the verdict of now).

When the run is over (a clean exit, or the end of the log: ``on_finish``), it is judged
once as a whole, from a sample of its losses spread evenly over its steps, with a rank
test across thirds (never a verdict taken at every window: a verdict taken many times
is wrong many times):

- **never learned**: no third of the run is ``min_improvement`` below the first, beyond
  the noise. A warning, whatever its length (a fine-tune logged a dozen times, a
  10 000-step run at chance);
- **stopped learning early**: the run learned a little, but the last three quarters of
  its steps brought nothing, train or eval: it has spent three times as long flat as it
  took to learn, at a level still above a quarter of where it started (a run that shed
  ``CONVERGED_SHARE`` of its starting loss and then flattens has converged: the windows'
  information says so). A warning: the severity policy calls a run that leaves most of
  its compute unused at a mediocre level broken. A collapse to exactly 0 is
  ``loss_collapsed``'s.

Either is withheld when the eval loss improved over the same stretch (a fine-tune whose
per-100-step train loss is noise while its eval loss falls is learning), while the lr
is 0, or while it still warms up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....probe.schema import EV_EXIT, Record
from ..text.fmt import number as fmt
from .alerts import INFO, WARNING, Alert, Severity
from .base import Rule, Tracker
from .ending import Ending, RunEnding
from .window import falling_z, finite_losses, median_of, take_every

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block


MIN_WINDOW_LOSSES = 5  # losses a plateau window needs, however many steps it spans
SHORT_RUN_LOSSES = (8, 256)  # a run judged whole at its end: at least 8 losses
SAMPLE = 2048  # losses kept over the whole run, evenly spread (every 2nd, 4th... once full)
EARLY_SHARE = 0.25  # "stopped learning early": all learning in this first share of steps
# ... and a run that shed this share of its starting loss before it flattened has
# converged (information); one that flattened higher stopped learning early (a warning)
CONVERGED_SHARE = 0.75
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
    def __init__(
        self,
        engine: EngineState,
        divergence_alert: Callable[[], Alert | None],
        ending: RunEnding,
    ) -> None:
        super().__init__(engine)
        # read at the run's end (``_end_of_run``): the divergence rule's current alert and
        # how the run ended (the crash rule's), handed over by ``ruleset.RuleSet``; read
        # only (the tracker stays the divergence rule's to clear at a new segment)
        self.divergence_alert = divergence_alert
        self.ending = ending
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
        # (step, loss) over the whole run, evenly spread: the end-of-run judgement
        self.sample: list[tuple[int, float]] = []
        self.stride = 1
        self.taken = 0
        self.ended = False

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, blk: Block) -> None:
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
        self.taken, self.stride = take_every(
            self.sample,
            len(steps),
            lambda j: (steps[j], losses[j]),
            self.taken,
            self.stride,
            SAMPLE,
        )
        # windows in steps, not records: a window closes once it spans cur_len steps and
        # holds a few losses (a log written every 50 steps fills a 50-step window with one)
        cur = self.cur
        n = len(cur) + len(losses)
        if (
            cur
            and n < self.cur_len
            and (n < MIN_WINDOW_LOSSES or max(steps) - self.cur_start + 1 < self.cur_len)
        ):
            cur.extend(losses)  # the usual block: the open window goes on, none closes
            return
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

    def _judge(self, e: EngineState, step: int) -> None:
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
            if a.severity != sev:
                self.tr.revise(severity=sev)
            self.tr.hold(step)
            self.span = span
        elif self.tr.active and gain >= self.min_imp:
            up = self.tr.alert
            if up is not None and up.severity == WARNING:
                # it was stuck for a while, then learned: not "not learning" any more
                self.tr.revise(severity=INFO, title="Loss plateau, then learning resumed")
            self.tr.clear(step)

    def on_event(self, e: EngineState, rec: Record) -> None:
        if self.on and rec.get("type") == EV_EXIT and rec.get("status") == "ok":
            self._end_of_run(e)

    def on_finish(self, e: EngineState) -> None:
        if self.on:
            self._end_of_run(e)

    def _end_of_run(self, e: EngineState) -> None:
        """The run is over: judged once as a whole (the module's docstring). Not a run
        that crashed or was killed: how it ended is the news, not how it learned."""
        if self.ended or self.first_step is None:
            return
        self.ended = True
        if self.ending.ending in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED):
            return
        if e.segments.mixed is not None:
            return  # two writers: their losses are not one run's
        blown = self.divergence_alert()
        if blown is not None and blown.severity != INFO:
            return  # it diverged: "not learning, try a larger lr" would be the wrong story
        xs = self.sample
        if len(xs) < SHORT_RUN_LOSSES[0]:
            return
        if e.lr_max is not None and e.lr_max <= 0:
            return  # lr 0 all along: nothing was supposed to move
        if warming_up(e.lr_initial, e.lr, e.lr_max):
            return  # lr still rising at the end: all warm-up, the loss may wait for it
        a = self.tr.alert
        if a is not None and a.active and a.severity == WARNING:
            return  # the windows say "not learning" already
        start = median_of(x for _, x in xs[:3]) or 0.0
        if not self.judged and a is None and len(xs) < SHORT_RUN_LOSSES[1] and self.stride == 1:
            # too short for the windows: did any third get better than the first, beyond
            # the noise (the rank test, once the thirds are long enough to tell)?
            verdict = _thirds(xs, self.min_imp)
            if verdict is None:
                return
            gain, z, first, best, last = verdict
            if (gain < self.min_imp or z < NOISE_Z) and (first - last) / abs(
                first
            ) > -self.max_rise:
                self._say(e, xs, start, "never", gain, z, first, best, last)
                return
        # stopped learning early: the last three quarters of the steps, in thirds, no third
        # min_improvement better than the first of them (flat, not merely "not surely
        # falling": a noisy run that still creeps down is not called stuck); or a middle
        # third lower by luck in a tail that ended no lower and that the rank test reads as
        # not falling at all (z <= 0: its later losses rank no lower than its earlier ones)
        s0, s1 = xs[0][0], xs[-1][0]
        cut = s0 + EARLY_SHARE * (s1 - s0)
        tail = [p for p in xs if p[0] >= cut]
        if len(tail) < SHORT_RUN_LOSSES[0]:
            return
        verdict = _thirds(tail, self.min_imp)
        if verdict is None:
            return
        gain, z, first, best, last = verdict
        ended = (first - last) / abs(first)
        flat = gain < self.min_imp or (ended < self.min_imp and z <= 0.0)
        if flat and ended > -self.max_rise:
            if start and (start - last) / abs(start) >= CONVERGED_SHARE:
                return  # converged: three quarters of the starting loss gone
            self._say(e, tail, start, "early", gain, z, first, best, last)

    def _say(
        self,
        e: EngineState,
        xs: list[tuple[int, float]],
        start: float,
        how: str,
        gain: float,
        z: float,
        first: float,
        best: float,
        last: float,
    ) -> None:
        since = xs[0][0]
        eval_gain = e.fig.evals.gain_since(since)
        if eval_gain is not None and eval_gain >= self.min_imp:
            return  # the eval loss improved: learning, whatever the logged train loss says
        n = len(xs)
        total = (start - last) / abs(start) if start else 0.0
        ev: dict[str, Any] = {
            "losses": n,
            "since_step": since,
            "first_third_median": first,
            "best_third_median": best,
            "last_third_median": last,
            "improvement": gain,
            "rank_z": z,
            "total_improvement": total,
            "loss_first": start,
            "lr": e.lr,
            "whole_run": how == "never",
        }
        if eval_gain is not None:
            ev["eval_improvement"] = eval_gain
        span = f"steps {since}-{e.last_step}"
        if how == "never":
            title = "Loss plateau (not learning)"
            k = n // 3
            msg = (
                f"the run ended without learning: median loss {fmt(first)} over its first {k} "
                f"logged losses, {fmt(last)} over its last {k}; its best stretch of {k}: "
                f"{_why(gain, z, self.min_imp)} ({n} losses, {span})"
            )
        else:
            share = 100 * (1 - EARLY_SHARE)
            title = (
                "Loss plateau (not learning)"
                if total < self.stuck
                else "Loss plateau (stopped learning early)"
            )
            msg = (
                f"no progress over the last {fmt(share)} % of the run ({span}): median loss "
                f"{fmt(first)} -> {fmt(last)}, its best stretch {_why(gain, z, self.min_imp, tail=True)}; "
                f"{fmt(100 * total)} % below the start, all of it in the first "
                f"{fmt(100 * EARLY_SHARE)} %"
            )
        if eval_gain is not None:
            msg += f"; the eval loss moved {fmt(100 * eval_gain)} %"
        self.tr.fire(since, WARNING, title, msg, ev, t=e.t, refresh=True)
        self.tr.hold(e.last_step)


def _thirds(
    xs: list[tuple[int, float]], min_imp: float
) -> tuple[float, float, float, float, float] | None:
    """(gain of the best later third over the first, the rank test's z, and the first,
    best and last thirds' medians) of a stretch of losses; None when the first is 0."""
    k = len(xs) // 3
    parts = [[x for _, x in xs[i : i + k]] for i in (0, k, 2 * k)]
    parts[2] = [x for _, x in xs[2 * k :]]
    meds = [median_of(p) or 0.0 for p in parts]
    first = meds[0]
    if not first:
        return None
    best = min(meds[1:])
    gain = (first - best) / abs(first)
    # the rank test, once the thirds are long enough for it to tell a fall from noise
    z = falling_z([sorted(p) for p in parts]) if k >= RANKED_THIRD else NOISE_Z
    if k < RANKED_THIRD and gain < min_imp:
        z = 0.0
    return gain, z, first, best, meds[2]


def _why(gain: float, z: float, min_imp: float, *, tail: bool = False) -> str:
    """Why a stretch does not count as better: too little, or not clear of the noise (the
    tail's test: the run ended where the tail began, and its thirds do not fall at all)."""
    if gain < min_imp:
        return f"{fmt(100 * gain)} % better, < {fmt(100 * min_imp)} %"
    if tail:
        return (
            f"{fmt(100 * gain)} % better, but the run ended less than {fmt(100 * min_imp)} % "
            f"below where this stretch began and its thirds show no fall at all (rank test "
            f"z {fmt(z)} <= 0)"
        )
    return (
        f"{fmt(100 * gain)} % better, but the thirds show no fall beyond the noise "
        f"(rank test z {fmt(z)} < {fmt(NOISE_Z)})"
    )
