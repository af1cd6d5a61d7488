"""Overfitting: the eval loss stops improving while the train loss keeps falling.

Never from one evaluation: each evaluation set is judged on its own history, against
its own noise. Two stages, as early stopping reads a run: information once two
evaluations in a row sit above the best one (past its best: the best checkpoint is the one
to keep), withdrawn if a later evaluation sets a new best; a warning once the rise holds
``patience`` evaluations and clears the noise, with a rising trend or every one of them
above the best (a step up that stays is as real as a slope). Runs evaluated once an epoch
have 3 to 5 evaluations in all: there a rise of ``large_rise`` (10 %) or more on the last
two evaluations, beyond the measured noise where there is enough to measure it, is a
warning too (the severity policy: a run past its best by that much wastes compute); it
becomes information again if the next evaluations come back below that line.

"The train loss falls" means: it is lower than at the best evaluation, or it stayed at a
level it had already reached by learning (a memorised training set pins the train loss at
its floor while the eval loss climbs). A warning that a later evaluation proves wrong (a
new best) becomes information: the run was not past its best after all. Each set's
history and the statistics of a few noisy evaluations are in ``evalseries.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....probe.schema import Record, step_or
from ..text.fmt import number as fmt
from .alerts import INFO, WARNING, Alert
from .base import Rule, Tracker
from .evals import MAX_EVAL_SETS, eval_losses
from .evalseries import (
    NOISE_EVALS,
    EvalSet,
    Evaluation,
    centred_medians,
    eval_noise,
    luck_sigmas,
    t_critical,
)
from .window import linear_fit, median_of

if TYPE_CHECKING:
    from .state import EngineState


class Overfitting(Rule):
    """Eval loss stops improving while the train loss keeps falling: never from one
    evaluation. Each evaluation set is judged on its own (one alert per set that
    overfits): interleaved sets at different levels would read as a noisy mess."""

    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("overfitting")
        self.patience = max(1, int(c["patience"]))
        self.tol = float(c["tolerance"])
        self.noise_k = float(c["noise_factor"])
        self.large = float(c["large_rise"])
        self.sets: dict[str, EvalSet] = {}
        self.trackers: dict[str, Tracker] = {}  # per set (the engine clears them on a new segment)
        self.count = 0  # eval records

    def alert_trackers(self) -> list[Tracker]:
        return list(self.trackers.values())

    @property
    def primary(self) -> EvalSet | None:
        """The set the facts describe: ``loss``, else the first set seen."""
        return self.sets.get("loss") or next(iter(self.sets.values()), None)

    @property
    def evals(self) -> list[Evaluation]:
        p = self.primary
        return p.evals if p is not None else []

    @property
    def best(self) -> int | None:
        p = self.primary
        return p.best if p is not None else None

    @property
    def last(self) -> Evaluation | None:
        p = self.primary
        return p.last if p is not None else None

    def on_eval(self, e: EngineState, rec: Record) -> None:
        self.count += 1
        losses = eval_losses(rec)
        if not losses:
            return
        step = step_or(rec, e.last_step)
        train = e.fig.loss_med
        if train is None:  # no block closed yet: the losses logged so far
            train = median_of(x for x in e.blk.loss if x is not None)
        for name, loss in losses:
            es = self.sets.get(name)
            if es is None:
                if len(self.sets) >= MAX_EVAL_SETS:
                    continue
                es = self.sets[name] = EvalSet(name)
                self.trackers[name] = Tracker(e, "overfitting")
            es.add((step, loss, train), e.steps)
            if self.on:
                self._judge(e, es, self.trackers[name])

    def _judge(self, e: EngineState, es: EvalSet, tr: Tracker) -> None:
        ev_all, raw = es.recent()
        n = len(ev_all)
        a = tr.alert
        if a is not None and n >= 2 and raw[-1] <= min(raw[:-1]):
            # a new best: the run was not past its best after all
            if a.severity == INFO and a.evidence.get("stage") == "early":
                tr.retract()
                return
            if a.severity == WARNING and not a.evidence.get("refuted"):
                _refute(tr, a, ev_all[-1])
                tr.clear(ev_all[-1][0])
        memo: list[float] = []

        def noise() -> float:  # both stages read the same evaluations: measured once
            if not memo:
                memo.append(eval_noise(raw))
            return memo[0]

        if n >= self.patience + 2:
            self._warn(e, es, tr, noise)
        self._early(e, es, tr, noise)  # does nothing once a warning was raised

    def _early(
        self,
        e: EngineState,
        es: EvalSet,
        tr: Tracker,
        eval_noise_of: Callable[[], float],
    ) -> None:
        """The first stage: the last ``EARLY_EVALS`` evaluations all above the best one by
        the tolerance and by sqrt(2 ln n) noise sigmas (when there are enough evaluations to
        measure the noise), while the train loss fell. Information: two evaluations cannot tell a rise from
        noise, but they do say which checkpoint is the best so far."""
        ev_all, raw = es.recent()
        n = len(ev_all)
        if n < EARLY_EVALS + 1:
            return
        up = tr.alert
        if up is not None and up.severity != INFO:
            # a warning episode already (active or over): not demoted, unless it was the
            # large rise of few evaluations and the latest ones came back below its line
            if up.evidence.get("stage") == "large" and up.active:
                line = up.evidence.get("eval_loss_best")
                if isinstance(line, float) and min(raw[-EARLY_EVALS:]) < line * (1 + self.large):
                    tr.revise(
                        {"recovered_at": ev_all[-1][0]},
                        severity=INFO,
                        title="Eval loss rose, then came back",
                    )
                    tr.clear(ev_all[-1][0])
            return
        # the best single evaluation is the luckiest of n noisy draws, about sqrt(2 ln n)
        # noise sigmas below the level it was drawn from: a rise must clear that much before
        # it says anything (with fewer than 5 evaluations the noise is unknown: 0)
        b = min(range(n), key=lambda i: (raw[i], -i))
        later = n - 1 - b
        bstep, bloss, btrain = ev_all[b]
        step, loss, train = ev_all[-1]
        # the noise only once the best is old enough to ask (an eval every step of a
        # falling loss must not pay for it on each)
        noise = eval_noise_of() if later >= EARLY_EVALS else 0.0
        margin = max(self.tol * abs(bloss), noise * luck_sigmas(n))
        if (
            later < EARLY_EVALS
            or any(x <= bloss + margin for x in raw[-EARLY_EVALS:])
            or not self._train_fell(e, train, btrain)
        ):
            if tr.active:
                tr.clear(step)
            return
        assert train is not None and btrain is not None  # _train_fell says so
        # a large rise on every evaluation since the best, beyond the noise where it can be
        # measured: a warning already (a run evaluated once an epoch has 3 to 5 of them)
        since = raw[b + 1 :]
        recent = min(raw[-EARLY_EVALS:])
        large = recent >= bloss * (1 + self.large) and (
            n < NOISE_EVALS or recent >= bloss + (self.noise_k + luck_sigmas(n)) * noise
        )
        which = "eval loss" if es.name == "loss" else f"eval {es.name}"
        ev: dict[str, Any] = {
            "eval_loss": loss,
            "eval_loss_best": bloss,
            "eval_noise": noise,
            "best_step": bstep,
            "evals_since_best": later,
            "train_loss": train,
            "train_loss_at_best": btrain,
            "rise": min(since) / bloss - 1 if bloss else None,
            "stage": "large" if large else "early",
        }
        if es.name != "loss":
            ev["eval_set"] = es.name
        how = "fell" if train < btrain * (1 - self.tol) else "stayed at"
        if large:
            msg = (
                f"{which} {fmt(loss)}: the last {EARLY_EVALS} evaluations are "
                f"{fmt(100 * self.large)} % or more above its best {fmt(bloss)} (step {bstep}) "
                f"while train loss {how} {fmt(btrain)} -> {fmt(train)}: the step {bstep} "
                "checkpoint is the one to keep"
            )
            tr.fire(ev_all[b + 1][0], WARNING, "Overfitting", msg, ev, t=e.last_t, refresh=True)
            tr.hold(step)
            return
        msg = (
            f"{which} {fmt(loss)} has stayed above its best {fmt(bloss)} (step {bstep}) for "
            f"{later} evaluations while train loss {how} {fmt(btrain)} -> {fmt(train)}: the "
            f"step {bstep} checkpoint is the best so far (a warning once the rise holds "
            f"{self.patience} evaluations above the noise)"
        )
        tr.fire(
            ev_all[b + 1][0], INFO, "Eval loss past its best", msg, ev, t=e.last_t, refresh=True
        )
        tr.hold(step)

    def _train_fell(self, e: EngineState, train: float | None, btrain: float | None) -> bool:
        """The train loss is lower than at the best evaluation, or no higher and the run
        had learned to get there (a memorised training set pins it at its floor)."""
        if train is None or btrain is None:
            return False
        if train < btrain * (1 - self.tol):
            return True
        first = e.fig.loss_first
        learned = first is not None and first > 0 and btrain <= first * (1 - LEARNED)
        return learned and train <= btrain * (1 + self.tol)

    def _recovered(self, tr: Tracker, level: float, step: int | None) -> None:
        """A warning whose eval level has come back within its margin of the best it was
        measured from: the rise was temporary, the run was not past its best (the verdict
        of now, as for a new best): information, until it rises again."""
        a = tr.alert
        if a is None or a.severity != WARNING or a.evidence.get("stage") == "large":
            return
        best, margin = a.evidence.get("eval_loss_best"), a.evidence.get("margin")
        if isinstance(best, float) and isinstance(margin, float) and level <= best + margin:
            tr.revise({"recovered_at": step}, severity=INFO, title="Eval loss rose, then came back")
            tr.clear(step)

    def _warn(
        self,
        e: EngineState,
        es: EvalSet,
        tr: Tracker,
        eval_noise_of: Callable[[], float],
    ) -> None:
        """The second stage: a warning (raised over an early information, which it replaces)."""
        ev_all, raw = es.recent()
        n = len(ev_all)
        # evaluations on a small held-out set are noisy: judge the median of 3 consecutive
        # ones, and demand a rise well above the eval-to-eval noise (from second differences,
        # which a steady trend does not inflate)
        # the best level: the median of each evaluation and its two neighbours (centred, so
        # the best sits where the evaluations were best, not one or two evaluations later)
        sm = centred_medians(raw)
        b = min(range(n), key=lambda i: (sm[i], -i))  # the latest of equal bests
        bstep, _, btrain = ev_all[b]
        bloss = sm[b]
        later = ev_all[b + 1 :]
        if len(later) < self.patience:
            if tr.active and tr.alert is not None and tr.alert.severity == WARNING:
                tr.clear(ev_all[-1][0])
            return
        noise = eval_noise_of()
        # the level now: the median of the last `patience` evaluations, whose noise is about
        # 1.25 / sqrt(patience) of one evaluation's
        level = median_of(raw[-self.patience :]) or 0.0
        # ... plus how far below its level the best of n smoothed evaluations lies by luck
        # alone (a median of 3 has 1.25 / sqrt(3) of one evaluation's noise): the best is
        # the minimum of a noisy series, never a baseline as it stands
        luck = luck_sigmas(n) * noise * 1.2533 / 3**0.5
        margin = max(
            self.tol * abs(bloss), self.noise_k * noise * 1.2533 / self.patience**0.5 + luck
        )
        step, loss, train = ev_all[-1]
        if train is None or btrain is None:
            return
        self._recovered(tr, level, step)
        # a real upward trend since the best, not one lucky low evaluation, at the t so few
        # points must clear (the luck term above already allows for the best being picked
        # for being low) ...
        pts = raw[b:]
        slope, r2 = linear_fit([float(i) for i in range(len(pts))], pts)
        tstat = (r2 * (len(pts) - 2) / (1 - r2)) ** 0.5 if r2 < 1 else math.inf
        trend = (
            level > bloss + margin
            and raw[-1] > bloss
            and slope > 0
            and tstat >= t_critical(len(pts) - 2)
        )
        # ... or a step up that holds: every one of the last `patience` evaluations
        # `large_rise` above the best and beyond the noise of the evaluations since it (the
        # differences of a series that fell fast and then stepped up read the fall and the
        # step as noise; the evaluations since the best, around their own median, do not)
        since = raw[b + 1 :]
        spread = noise
        if len(since) >= NOISE_EVALS:  # enough of them to measure their own noise
            mid = median_of(since) or 0.0
            spread = min(noise, 1.4826 * (median_of(abs(x - mid) for x in since) or 0.0))
        floor = max(bloss * (1 + self.large), bloss + self.noise_k * spread)
        held = all(x >= floor for x in raw[-self.patience :])
        if not (trend or held):
            return
        gap, bgap = level - train, bloss - btrain
        if self._train_fell(e, train, btrain) and gap > bgap:
            ev: dict[str, Any] = {
                "eval_loss": loss,
                "eval_loss_smoothed": level,
                "eval_loss_best": bloss,
                "eval_noise": noise,
                "margin": margin,
                "best_step": bstep,
                "evals_since_best": len(later),
                "train_loss": train,
                "train_loss_at_best": btrain,
                "gap": gap,
                "gap_at_best": bgap,
            }
            which = "eval loss"
            if es.name != "loss":  # one of several evaluation sets: say which
                ev["eval_set"] = es.name
                which = f"eval {es.name}"
            msg = (
                f"{which} {fmt(loss)} vs best {fmt(bloss)} at step {bstep} ({len(later)} evaluations "
                f"without improvement) while train loss fell {fmt(btrain)} -> {fmt(train)}; "
                f"gap {fmt(bgap)} -> {fmt(gap)}"
            )
            tr.fire(later[0][0], WARNING, "Overfitting", msg, ev, t=e.last_t, refresh=True)
            tr.hold(step)


EARLY_EVALS = 2  # evaluations in a row above the best for the early stage
LEARNED = 0.1  # the train loss fell this far from its start: the run had learned


def _refute(tr: Tracker, a: Alert, at: Evaluation) -> None:
    """A later evaluation beat the best the warning was measured from: information."""
    tr.revise(
        {"refuted": True},
        severity=INFO,
        title="Eval loss rose, then improved again",
        message=a.message + f"; a new best eval loss {fmt(at[1])} came at step {at[0]}",
    )
