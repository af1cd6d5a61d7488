"""Sudden blow-ups: loss spikes and exploding gradients (divergence: ``divergence.py``).

Every threshold is relative to the run's own recent history (median of the last 100
steps), because loss and grad-norm scales differ by orders of magnitude between models.
A value must also beat the largest value of that window by ``over_max``: with small,
noisy batches a 10x-the-median loss can be an ordinary hard batch, while a real spike
stands above everything the window has seen (Megatron-Core's "10x the max seen" idea).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from ..text.fmt import number as fmt
from .alerts import CRITICAL, INFO, WARNING, Severity
from .base import Rule, Tracker
from .window import exp_or_inf, median_of

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

SPIKE_TITLE = "Gradient norm spike"
ABSORBED = 1.5  # losses after a lone spike within this of the median before: absorbed
ABSORB_SAMPLES = 64  # losses after the spike looked at (bounded)
ABSORB_MIN = 3  # losses after it needed to say anything (2 at the log's end)
QUIET_TO_CLEAR = 20  # steps without a trigger before a spike/explosion episode ends


class Aftermath:
    """The losses logged after a spike: did the run absorb it?

    Absorbed: the median of the losses after the last spike is within ``ABSORBED`` (1.5x)
    of the median before the first one, or below the 90th percentile of that window (a
    loss logged at 4 decimals near 0.0003 moves by whole quanta, and a noisy run's
    ordinary batches reach its 90th percentile). Decided from the records, so a replay
    and a live viewer agree. The severity policy: a spike the run absorbed needs no
    action, so it is information, at any step.
    """

    __slots__ = ("before", "p90", "after")

    def __init__(self) -> None:
        self.before: float | None = None  # the loss median when the first spike came
        self.p90: float | None = None
        self.after: list[tuple[int, float]] = []  # (step, loss) since then (bounded)

    @property
    def watching(self) -> bool:
        return self.before is not None

    def watch(self, e: EngineState) -> None:
        if self.before is None:
            self.before, self.p90, self.after = e.fig.loss_med, e.fig.loss_p90, []

    def take(self, b: Block) -> None:
        if self.before is not None and len(self.after) < 2 * ABSORB_SAMPLES:
            self.after.extend((s, x) for s, x in zip(b.steps, b.loss, strict=True) if x is not None)

    def ready(self, last_hit: int | None) -> bool:
        """Enough losses logged after the last spike to say (a log written every 50 steps
        has one record in the quiet spell that ends an episode)."""
        return sum(1 for s, _ in self.after if last_hit is None or s > last_hit) >= ABSORB_MIN

    def absorbed(self, last_hit: int | None, least: int = ABSORB_MIN) -> tuple[bool, float | None]:
        """(absorbed?, the median after); stops watching. ``last_hit``: the last spike's
        step (the losses of spike steps themselves are not "after"); ``least``: losses
        after it needed (fewer at the log's end, where no more will come)."""
        before, p90 = self.before, self.p90
        after = [x for s, x in self.after if last_hit is None or s > last_hit][:ABSORB_SAMPLES]
        self.before, self.p90, self.after = None, None, []
        med = median_of(after) if len(after) >= least else None
        if before is None or med is None:
            return False, med
        return med <= max(ABSORBED * before, p90 or 0.0), med


class _Episodes(Rule):
    """What the loss-spike and grad-explosion rules share: an episode ends after
    ``QUIET_TO_CLEAR`` steps without a trigger, and a lone spike the loss did not react to
    (``Aftermath``) is said as absorbed, information at any step."""

    tr: Tracker
    aftermath: Aftermath
    last_hit: int | None

    def on_block(self, e: EngineState, b: Block) -> None:
        am = self.aftermath
        if am.watching:
            am.take(b)
        quiet = self.last_hit is not None and e.step - self.last_hit >= QUIET_TO_CLEAR
        if am.watching and quiet and am.ready(self.last_hit):
            self._absorbed(ABSORB_MIN)
        if self.tr.active and quiet:
            self.tr.clear(e.step)

    def on_finish(self, e: EngineState) -> None:
        if self.aftermath.watching:
            self._absorbed(2)  # the log is over: no more losses will come

    def _absorbed(self, least: int) -> None:
        a, before = self.tr.alert, self.aftermath.before
        absorbed, after = self.aftermath.absorbed(self.last_hit, least)
        if absorbed and a is not None and a.severity == WARNING:
            self.tr.revise(
                {"absorbed": True},
                severity=INFO,
                title=a.title if "(absorbed)" in a.title else a.title + " (absorbed)",
                message=a.message
                + f"; the loss did not react (median {fmt(after)} after, {fmt(before)} before)",
            )


class LossSpike(_Episodes):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("loss_spike")
        self.ratio = float(c["ratio"])
        self.over_max = float(c["over_max"])
        self.min_samples = int(c["min_samples"])
        self.sigmas = float(c["log_sigmas"])
        self.tr = Tracker(engine, "loss_spike")
        self.count = 0
        self.last_hit: int | None = None
        self.wmax: float | None = None
        self.aftermath = Aftermath()

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def threshold(self, e: EngineState) -> float:
        """At each block end: the loss that counts as a spike until the next one (the
        engine compares each step's loss with it inline)."""
        med = e.fig.loss_med
        if (
            not self.on
            or not e.warm
            or med is None
            or med <= 0
            or e.fig.loss_seen < self.min_samples
        ):
            return math.inf
        self.wmax = e.fig.loss_wmax or med
        return max(
            self.ratio * med,
            self.over_max * self.wmax,
            med * exp_or_inf(self.sigmas * e.fig.loss_spread),
        )

    def spike(self, e: EngineState) -> None:
        loss, med = e.loss, e.fig.loss_med
        if loss is None or not med:
            return
        self.last_hit = e.step
        r = loss / med
        ev = {
            "loss": loss,
            "threshold": e.loss_hi,
            "log_sigma": e.fig.loss_spread,
            "median": med,
            "ratio": r,
            "window": len(e.fig.loss_win),
            "window_max": self.wmax,
            "lr": e.lr,
        }
        msg = f"loss {fmt(loss)} = {fmt(r)}x the median of the last {len(e.fig.loss_win)} steps ({fmt(med)})"
        prev = self.tr.slot if self.tr.alert is not None else None
        self.tr.fire(e.step, WARNING, "Loss spike", msg, ev, t=e.t)
        self.count = self.count + 1 if self.tr.slot == prev else 1  # spikes in this episode
        self.tr.revise({"spikes": self.count})
        self.aftermath.watch(e)


class GradExplosion(_Episodes):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("grad_explosion")
        self.crit = float(c["critical_ratio"])
        self.warn = float(c["warn_ratio"])
        self.k = int(c["warn_k"])
        self.n = max(1, int(c["warn_n"]))
        self.over_max = float(c["over_max"])
        self.early = float(c["early_ratio"])
        self.warn_p90 = float(c["warn_p90_ratio"])
        self.warn_sigmas = float(c["warn_log_sigmas"])
        self.min_samples = int(c["min_samples"])
        self.critical_after = int(c["critical_after"])
        self.sigmas = float(c["log_sigmas"])
        self.recent: deque[int] = deque()  # steps at or above warn_ratio x median
        self.crit_hits: deque[int] = deque()  # steps at or above the critical line
        self.crit_k = max(1, int(c["critical_k"]))
        self.crit_line = math.inf
        self.aftermath = Aftermath()  # the losses after a lone spike: absorbed?
        self.tr = Tracker(engine, "grad_explosion")
        self.last_hit: int | None = None
        self.wmax: float | None = None
        self.early_phase = True

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def thresholds(self, e: EngineState) -> tuple[float, float]:
        """At each block end: (critical, warning) grad norms until the next one (the
        engine compares each step's grad norm with them inline)."""
        med, n = e.fig.gn_med, e.fig.gn_seen  # samples seen, not the window's size (see Config)
        if not self.on or med is None or med <= 0 or n < 5:
            return math.inf, math.inf
        self.wmax = e.fig.gn_wmax or med
        self.early_phase = not e.warm or n < self.min_samples
        if self.early_phase:
            # before the baseline settles only a blow-up by orders of magnitude counts
            hi = max(self.early * med, self.over_max * self.wmax)
            return hi, hi
        hi = max(
            self.crit * med,
            self.over_max * self.wmax,
            med * exp_or_inf(self.sigmas * e.fig.gn_spread),
        )
        # heavy-tailed grad norms (a converged model, tiny batches) reach 5x their median
        # routinely; a sustained blow-up also clears the window's 90th percentile by far
        warn = max(
            self.warn * med,
            self.warn_p90 * (e.fig.gn_p90 or med),
            med * exp_or_inf(self.warn_sigmas * e.fig.gn_spread),
        )
        return hi, min(warn, hi)

    def above(self, e: EngineState) -> None:
        """The step's grad norm reached the warning line (or the critical one)."""
        gn, med, step = e.gn, e.fig.gn_med, e.step
        if gn is None or not med:
            return
        r = gn / med
        hits = self.crit_hits
        while hits and hits[0] <= step - self.n:
            hits.popleft()
        if not hits:
            self.crit_line = e.gn_hi
        # the critical line as it stood at the first hit: the spike itself raises the window
        # maximum, and with it the line a second spike is compared with
        if gn >= min(e.gn_hi, self.crit_line):
            # one step over the critical line is a spike worth a look (clipping and Adam
            # absorb most; real fine-tunes show several such samples and finish fine): a
            # warning. Critical when it holds on crit_k of the last warn_n steps (in steps,
            # not records), or when the loss itself goes (divergence, NaN: their alerts)
            hits.append(step)
            settled = self._settled(e)
            if settled and len(hits) >= self.crit_k:
                self._fire(e, CRITICAL, gn, med, r, early=self.early_phase, held=len(hits))
            else:
                # one step over the line is a spike, not an explosion, whether or not the
                # baseline has filled (its title says so)
                lone = settled or len(hits) == 1
                self._fire(e, WARNING, gn, med, r, filling=not settled, single=lone)
            return
        q = self.recent
        q.append(step)
        while q and q[0] <= step - self.n:
            q.popleft()
        if len(q) >= self.k:
            self._fire(e, WARNING, gn, med, r)

    def _settled(self, e: EngineState) -> bool:
        """The baseline has its ``critical_after`` grad norms (or the run is in its warm-up,
        judged by the early ratio instead): a step past the critical line can be critical."""
        return self.early_phase or e.fig.gn_seen >= self.critical_after

    def _fire(
        self,
        e: EngineState,
        sev: Severity,
        gn: float,
        med: float,
        r: float,
        early: bool = False,
        filling: bool = False,
        single: bool = False,
        held: int = 0,
    ) -> None:
        self.last_hit = e.step
        ev = {
            "grad_norm": gn,
            "threshold": e.gn_hi if sev == CRITICAL else e.gn_warn,
            "log_sigma": e.fig.gn_spread,
            "median": med,
            "ratio": r,
            "window": len(e.fig.gn_win),
            "window_max": self.wmax,
            "lr": e.lr,
            "loss": e.loss,
        }
        msg = f"grad norm {fmt(gn)} = {fmt(r)}x the median of the last {len(e.fig.gn_win)} steps ({fmt(med)})"
        if filling:
            msg += f"; the baseline is still filling (critical from {self.critical_after} steps)"
        elif single:
            msg += f"; one step (critical when it holds on {self.crit_k} of {self.n} steps)"
        elif held:
            msg = f"{held} of the last {self.n} steps over the critical line; " + msg
        elif sev == WARNING:
            msg = (
                f"grad norm >= {fmt(self.warn)}x its median in {len(self.recent)} of the last {self.n} steps; "
                + msg
            )
        if early:
            msg += ", during warm-up"
        title = SPIKE_TITLE if single and sev == WARNING else "Exploding gradients"
        a = self.tr.fire(e.step, sev, title, msg, ev, t=e.t)
        # a lone spike, or any warning while the baseline still fills (gradients growing
        # into their working range: an LSTM's norms triple in its first 60 steps), waits
        # for the loss to say whether it mattered
        watch = a.title == SPIKE_TITLE or (a.severity == WARNING and not self._settled(e))
        if watch:
            self.aftermath.watch(e)
