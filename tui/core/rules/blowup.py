"""An lr far too high from the start: the early blow-up watch and what it finds.

Split from ``divergence.py`` (whose docstring names the three shapes): they are watched
in the first steps only, or judged once at the end, from their own losses, and never read
the smoothed level or its baseline. ``EarlyWatch`` keeps the first steps' losses and finds
a blow-up; the statistics and the wording are pure functions; ``Divergence`` keeps the
hooks, the alert and the run-wide sample, and raises what is found.
"""

from __future__ import annotations

import math
from collections import deque
from operator import sub
from typing import Any

from ..text.fmt import number as fmt
from .alerts import CRITICAL, WARNING, Severity
from .window import exp_or_inf, median_of

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

# what a check found: its evidence and its message
Finding = tuple[dict[str, Any], str]


def log_spread_of(logs: list[float]) -> float:
    """Robust sigma of already sorted log values, from their 16th/84th percentiles."""
    n = len(logs)
    return 0.5 * (logs[int(0.84 * (n - 1))] - logs[int(0.16 * (n - 1))]) if n >= 5 else 0.0


def step_noise(logs: list[float]) -> float:
    """Robust sigma of log(loss) from step-to-step differences (0 with fewer than 4 losses):
    the median |difference| of two independent draws is 0.954 sigma."""
    if len(logs) < 4:
        return 0.0
    d = sorted(map(abs, map(sub, logs[1:], logs)))  # |logs[i+1] - logs[i]|
    return d[len(d) // 2] / 0.954


class EarlyWatch:
    """The first ``early_steps`` steps, watched two ways before any window or baseline
    exists: a run of highs on each step (``high``), the median of a window of steps at each
    block's end (``median``). It finds; ``Divergence`` raises (or holds) the alert."""

    __slots__ = (
        "steps",
        "log_early",
        "start",
        "n",
        "logs",
        "high_from",
        "high_ref",
        "high_n",
        "high_bar",
        "first",
        "window",
        "median_open",
        "median_seen",
    )

    def __init__(self, steps: int, log_early: float, on: bool) -> None:
        self.steps = steps  # early_steps
        self.log_early = log_early  # log of early_ratio
        self.start: int | None = None  # the first step the per-step watch saw
        self.n = 0  # losses it has seen
        self.logs: list[float] = []  # log losses of the first steps, before any high
        self.high_from: int | None = None  # first step of the current run of early highs
        self.high_ref: float | None = None  # the reference it was judged against
        self.high_n = 0  # losses in the current run of early highs
        self.high_bar = 0.0  # ... and the log loss it had to reach (median + noise)
        self.first: list[float] = []  # the first few losses: where the run started
        self.window: deque[tuple[int, float]] = deque(maxlen=64)  # the early median's window
        self.median_open = on and steps > 0
        self.median_seen = 0  # losses the early median has taken

    def count(self, step: int) -> bool:
        """One more finite loss on the per-step path: ``False`` once the watch is over. In
        steps (a log written every 50 steps is past its start after one record), and never
        more than ``steps`` records: a log whose step number never advances must not keep
        this watch, and its list of losses, open."""
        if self.start is None:
            self.start = step
        self.n += 1
        return step - self.start < self.steps and self.n <= self.steps

    def high(self, step: int, x: float) -> float | None:
        """A blow-up in the first steps: the commonest "lr too high" story (2.3 -> 6 -> 34
        in three steps, then the model sits at chance). ``x``: the step's log loss.

        Finite losses in a row at ``early_ratio`` (5) x where the run started (the first
        loss, or the median of the losses so far when that is lower: a ramp 2.3 -> 6 -> 34
        must not raise its own reference), and ``EARLY_SIGMAS`` step-to-step noise above
        it once there are a few losses. Two in a row (three before the start's noise is
        known), because one batch can be 5x off on a noisy start, several in a row rarely
        are. The log reference once they are there, else ``None``.
        """
        before = self.logs
        if not before:
            before.append(x)
            return None
        if self.high_from is None:
            med = median_of(before)
            self.high_ref = before[0] if med is None or before[0] < med else med
            # the noise bar stands on the median: a low first draw must not lower it
            self.high_bar = (med or 0.0) + EARLY_SIGMAS * step_noise(before)
        ref = self.high_ref
        # a loss at float precision (1e-10, a model that already fits) has no ratio scale
        if ref is None or ref < TINY_LOG or x - ref < self.log_early or x < self.high_bar:
            self.high_from = None
            before.append(x)
            return None
        if self.high_from is None:
            self.high_from = step
            self.high_n = 0
        self.high_n += 1
        # two in a row once the start's noise is known (8 losses before the rise), three
        # while it is not: a low first draw on a noisy start must not read as a blow-up
        if self.high_n < (2 if len(before) >= EARLY_KNOWN else 3):
            return None
        return ref

    def high_finding(
        self, loss: float, x: float, ref: float, step: int, lr: float | None
    ) -> Finding:
        """What a run of highs found (``high`` gave ``ref``): ``loss`` (log ``x``) at ``step``."""
        r = exp_or_inf(x - ref)
        ev = {
            "loss": loss,
            "loss_before": exp_or_inf(ref),
            "ratio": r,
            "onset_step": self.high_from,
            "threshold_ratio": max(exp_or_inf(self.log_early), exp_or_inf(self.high_bar - ref)),
            "lr": lr,
        }
        msg = (
            f"the loss went from {fmt(exp_or_inf(ref))} to {fmt(loss)} ({fmt(r)}x) by step "
            f"{step}, within the first {self.steps} steps"
        )
        if lr is not None:
            msg += f"; lr {fmt(lr)}: likely far too high"
        return ev, msg

    def median(
        self, step: int, x: float, first_step: int | None, lr: float | None
    ) -> tuple[float, Severity, dict[str, Any], str] | None:
        """The loss ``x`` at ``step`` into the early median's window, and the window judged
        (``window_blowup``) once it holds ``WINDOW_LOSSES`` losses over ``WINDOW_STEPS``
        steps. Closed after the first ``steps`` steps, or the first 2 windows' worth of
        losses of a log written every N steps (in steps, and never more records than that).
        """
        w = self.window
        w.append((step, x))
        self.median_seen += 1
        s0 = self.start if self.start is not None else first_step
        if s0 is not None and step - s0 > self.steps and self.median_seen > 2 * WINDOW_LOSSES:
            self.median_open = False
            w.clear()
            return None
        while len(w) > WINDOW_LOSSES and step - w[0][0] >= WINDOW_STEPS:
            w.popleft()
        if len(w) < WINDOW_LOSSES:
            return None
        return window_blowup(self.first, w, step, self.log_early, lr)


def window_blowup(
    first: list[float],
    w: deque[tuple[int, float]],
    step: int,
    log_early: float,
    lr: float | None,
) -> tuple[float, Severity, dict[str, Any], str] | None:
    """The loss jumped at once and bounces far above where it started (3.5 -> 23 in two
    steps, then 8-40 for 100 steps: never two in a row at 5x, so ``_early`` misses it).

    The median of the window ``w`` of (step, loss), up to ``step``, against the start
    (``first[0]``, or the median of ``first`` when lower), clearing ``EARLY_WARN`` times
    it and ``WINDOW_SIGMAS`` of the window's own log noise (a noisy window's median says
    less). A warning; critical at ``early_ratio`` (5x) and beyond the noise. ``None``:
    no blow-up; else the start it was measured from, the severity, evidence and message.
    """
    ref = min(first[0], median_of(first) or first[0])
    if ref <= 0 or math.log(ref) < TINY_LOG:
        return None
    logs = sorted(math.log(x) for _, x in w)
    mid = logs[len(logs) // 2]
    # the larger of a robust and a plain estimate: ten losses misjudge either one, and
    # a sigma read too small turns a low first draw of a noisy run into a "blow-up"
    mean = sum(logs) / len(logs)
    sd = (sum((v - mean) ** 2 for v in logs) / (len(logs) - 1)) ** 0.5
    sigma = max(1.4826 * sorted(abs(v - mid) for v in logs)[len(logs) // 2], sd)
    ratio = exp_or_inf(mid) / ref
    bar = max(EARLY_WARN, exp_or_inf(WINDOW_SIGMAS * sigma))
    if ratio < bar:
        return None
    crit = ratio >= max(exp_or_inf(log_early), exp_or_inf(CRITICAL_SIGMAS * sigma))
    sev: Severity = CRITICAL if crit else WARNING
    onset = w[0][0]
    ev = {
        "loss_median": exp_or_inf(mid),
        "loss_before": ref,
        "ratio": ratio,
        "onset_step": onset,
        "threshold_ratio": bar,
        "window_steps": w[-1][0] - w[0][0] + 1,
        "lr": lr,
    }
    msg = (
        f"the loss's median over steps {onset}-{step} is {fmt(exp_or_inf(mid))}, "
        f"{fmt(ratio)}x the {fmt(ref)} it started at"
    )
    if lr is not None:
        msg += f"; lr {fmt(lr)}: likely far too high"
    return ref, sev, ev, msg


def never_came_down(
    xs: list[float], grads: int, zero_grads: int, lr: float | None, lr_max: float | None
) -> Finding | None:
    """The log begins after the blow-up (another tool's, logged every N steps): no rise to
    see, only a loss that never comes down. From the run's losses ``xs`` (sampled evenly):
    no stretch of ``NEVER_K`` losses ``NEVER_GAIN`` below the first ones, while the losses
    swing wildly (a log-spread of ``NEVER_SPREAD``: a run stuck at chance is calm) or the
    grad norm is exactly 0 on many steps (dead units after the blow-up: ``zero_grads`` of
    ``grads``). A warning naming the lr: a plateau says "not learning", this says why."""
    if len(xs) < NEVER_MIN:
        return None
    k = NEVER_K
    start = median_of(xs[:k]) or 0.0
    best = min(median_of(xs[i : i + k]) or math.inf for i in range(0, len(xs) - k + 1))
    if start <= 0 or best < start * (1 - NEVER_GAIN):
        return None
    logs = sorted(math.log(x) for x in xs)
    spread = log_spread_of(logs)
    zeros = zero_grads / grads if grads else 0.0
    if spread < NEVER_SPREAD and zeros < NEVER_ZERO_GRADS:
        return None
    ev = {
        "loss_first": start,
        "loss_best": best,
        "loss_median": exp_or_inf(logs[len(logs) // 2]),
        "log_spread": spread,
        "zero_grad_share": zeros,
        "losses": len(xs),
        "lr": lr,
        "lr_max": lr_max,
    }
    why = []
    if spread >= NEVER_SPREAD:
        why.append(f"it swings {fmt(exp_or_inf(spread))}x around its median")
    if zeros >= NEVER_ZERO_GRADS:
        why.append(f"the grad norm is exactly 0 on {fmt(100 * zeros)} % of the steps")
    msg = (
        f"the loss never came down: {fmt(start)} at the start, no stretch of the run "
        f"{fmt(100 * NEVER_GAIN)} % below it (best {fmt(best)}), and {' and '.join(why)}"
    )
    if lr_max is not None:
        msg += f"; lr up to {fmt(lr_max)}: likely far too high from the start"
    return ev, msg
