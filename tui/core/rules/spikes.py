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

from dltop.tui.core.alerts import CRITICAL, INFO, WARNING, Severity
from dltop.tui.core.fmt import number as fmt
from dltop.tui.core.rules.base import Rule, Tracker
from dltop.tui.core.rules.window import median_of

if TYPE_CHECKING:
    from dltop.tui.core.rules.engine import RuleEngine
    from dltop.tui.core.rules.window import Block

SPIKE_TITLE = "Gradient norm spike"
ABSORBED = 1.5  # losses after a lone grad spike within this of the median before: absorbed
ABSORB_SAMPLES = 64  # losses after the spike looked at (bounded)
QUIET_TO_CLEAR = 20  # steps without a trigger before a spike/explosion episode ends


class LossSpike(Rule):
    def __init__(self, engine: RuleEngine) -> None:
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

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def threshold(self, e: RuleEngine) -> float:
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
            med * math.exp(self.sigmas * e.fig.loss_spread),
        )

    def spike(self, e: RuleEngine) -> None:
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
        prev = self.tr.alert
        a = self.tr.fire(e.step, WARNING, "Loss spike", msg, ev, t=e.t)
        self.count = self.count + 1 if a is prev else 1  # spikes in this episode
        a.evidence["spikes"] = self.count

    def on_block(self, e: RuleEngine, b: Block) -> None:
        if (
            self.tr.active
            and self.last_hit is not None
            and e.step - self.last_hit >= QUIET_TO_CLEAR
        ):
            self.tr.clear(e.step)


class GradExplosion(Rule):
    def __init__(self, engine: RuleEngine) -> None:
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
        self.watch_loss: float | None = None  # loss median when a lone spike was raised
        self.after: list[float] = []  # finite losses logged since (bounded)
        self.tr = Tracker(engine, "grad_explosion")
        self.last_hit: int | None = None
        self.wmax: float | None = None
        self.early_phase = True

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def thresholds(self, e: RuleEngine) -> tuple[float, float]:
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
            med * math.exp(self.sigmas * e.fig.gn_spread),
        )
        # heavy-tailed grad norms (a converged model, tiny batches) reach 5x their median
        # routinely; a sustained blow-up also clears the window's 90th percentile by far
        warn = max(
            self.warn * med,
            self.warn_p90 * (e.fig.gn_p90 or med),
            med * math.exp(self.warn_sigmas * e.fig.gn_spread),
        )
        return hi, min(warn, hi)

    def above(self, e: RuleEngine) -> None:
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

    def _settled(self, e: RuleEngine) -> bool:
        """The baseline has its ``critical_after`` grad norms (or the run is in its warm-up,
        judged by the early ratio instead): a step past the critical line can be critical."""
        return self.early_phase or e.fig.gn_seen >= self.critical_after

    def on_block(self, e: RuleEngine, b: Block) -> None:
        if not self.tr.active:
            return
        if self.watch_loss is not None and len(self.after) < ABSORB_SAMPLES:
            self.after.extend(x for x in b.loss if x is not None)
        if self.last_hit is not None and e.step - self.last_hit >= QUIET_TO_CLEAR:
            self._absorbed()
            self.tr.clear(e.step)

    def _absorbed(self) -> None:
        """A lone spike, or a warning raised while the baseline still filled, that the run
        absorbed (the losses logged after it stayed within 1.5x of the median before it)
        is context, not a problem: info. Decided from the records, so a replay and a live
        viewer agree."""
        a, before = self.tr.alert, self.watch_loss
        self.watch_loss = None
        after = median_of(self.after[:ABSORB_SAMPLES])
        self.after = []
        if a is None or a.severity != WARNING or before is None or after is None:
            return
        if after <= ABSORBED * before:
            a.severity = INFO
            a.title += " (absorbed)"
            a.message += (
                f"; the loss did not react (median {fmt(after)} after, {fmt(before)} before)"
            )

    def _fire(
        self,
        e: RuleEngine,
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
        if watch and self.watch_loss is None:
            self.watch_loss, self.after = e.fig.loss_med, []
