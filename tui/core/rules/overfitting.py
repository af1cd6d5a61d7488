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
new best) becomes information: the run was not past its best after all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..alerts import INFO, WARNING, Alert
from ..fmt import number as fmt
from .base import Rule, Tracker
from .evals import MAX_EVAL_SETS, eval_losses, eval_step
from .window import linear_fit, median_of

if TYPE_CHECKING:
    from .state import EngineState


# one evaluation: (step, eval loss, train loss at that step)
Evaluation = tuple[int | None, float, float | None]
RECENT = 64  # evaluations a judgement reads


class _EvalSet:
    """One evaluation set's history: (step, eval loss, train loss at that step)."""

    __slots__ = ("name", "evals", "best", "trained")

    def __init__(self, name: str) -> None:
        self.name = name
        self.evals: list[Evaluation] = []
        self.best: int | None = None  # index into evals
        self.trained = -1  # the engine's step count at the last evaluation

    @property
    def last(self) -> Evaluation | None:
        return self.evals[-1] if self.evals else None

    def recent(self) -> tuple[list[Evaluation], list[float]]:
        """The last ``RECENT`` evaluations, and their eval losses alone."""
        evs = self.evals[-RECENT:]
        return evs, [x[1] for x in evs]

    def add(self, item: Evaluation, trained: int) -> None:
        """``trained``: steps the engine has seen so far (an evaluation at the same step
        with no training step between is the same checkpoint evaluated again)."""
        last = self.last
        again = trained == self.trained and trained > 0
        self.trained = trained
        if again and last is not None and item[0] is not None and item[0] == last[0]:
            # the same checkpoint evaluated again (a Trainer's final evaluate() after its
            # last in-loop one): one evaluation, the latest value, not a second data point
            # that makes a level look like a trend
            self.evals[-1] = item
            self.best = None  # found again below (the replaced one may have been the best)
        else:
            self.evals.append(item)
        if len(self.evals) > 512:
            keep = self.evals[self.best] if self.best is not None else None
            self.evals = self.evals[-256:]
            if keep is not None and keep not in self.evals:
                self.evals.insert(0, keep)
            self.best = None
        if self.best is None:
            self.best = min(range(len(self.evals)), key=lambda i: self.evals[i][1])
        elif item[1] < self.evals[self.best][1]:
            self.best = len(self.evals) - 1


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
        self.sets: dict[str, _EvalSet] = {}
        self.trackers: dict[str, Tracker] = {}  # per set (the engine clears them on a new segment)
        self.count = 0  # eval records

    def alert_trackers(self) -> list[Tracker]:
        return list(self.trackers.values())

    @property
    def primary(self) -> _EvalSet | None:
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

    def on_eval(self, e: EngineState, rec: dict[str, Any]) -> None:
        self.count += 1
        losses = eval_losses(rec)
        if not losses:
            return
        step = eval_step(rec, e.last_step)
        train = e.fig.loss_med
        if train is None:  # no block closed yet: the losses logged so far
            train = median_of(x for x in e.blk.loss if x is not None)
        for name, loss in losses:
            es = self.sets.get(name)
            if es is None:
                if len(self.sets) >= MAX_EVAL_SETS:
                    continue
                es = self.sets[name] = _EvalSet(name)
                self.trackers[name] = Tracker(e, "overfitting")
            es.add((step, loss, train), e.steps)
            if self.on:
                self._judge(e, es, self.trackers[name])

    def _judge(self, e: EngineState, es: _EvalSet, tr: Tracker) -> None:
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
        es: _EvalSet,
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
        margin = max(self.tol * abs(bloss), noise * _luck(n))
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
            n < NOISE_EVALS or recent >= bloss + (self.noise_k + _luck(n)) * noise
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
        es: _EvalSet,
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
        sm = _centred_medians(raw)
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
        luck = _luck(n) * noise * 1.2533 / 3**0.5
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
NOISE_EVALS = 5  # evaluations from which their noise can be measured (3 second differences)
LEARNED = 0.1  # the train loss fell this far from its start: the run had learned


def _refute(tr: Tracker, a: Alert, at: Evaluation) -> None:
    """A later evaluation beat the best the warning was measured from: information."""
    tr.revise(
        {"refuted": True},
        severity=INFO,
        title="Eval loss rose, then improved again",
        message=a.message + f"; a new best eval loss {fmt(at[1])} came at step {at[0]}",
    )


def _centred_medians(raw: list[float]) -> list[float]:
    """Each evaluation's median with its two neighbours (one at either end), written out:
    the same floats as ``median_of`` of each slice, without a sort per evaluation (this
    runs on every evaluation, over the last RECENT of them)."""
    n = len(raw)
    if n < 2:
        return [raw[0] or 0.0] if n else []
    # ``or 0.0``: as the slices' medians were taken (``median_of(...) or 0.0``), a -0.0 is 0.0
    out = [0.5 * (raw[0] + raw[1]) or 0.0]
    for x, y, z in zip(raw, raw[1:], raw[2:], strict=False):
        # the middle of a stable sort of three (equal values keep their order, as in
        # sorted(): 0.0 and -0.0 are equal and must come out as sorted() leaves them)
        if y < x:
            x, y = y, x
        if z < y:
            y = x if z < x else z
        out.append(y or 0.0)
    out.append(0.5 * (raw[-2] + raw[-1]) or 0.0)
    return out


def _luck(n: int) -> float:
    """How many noise sigmas the best of ``n`` noisy values lies below the level they
    were drawn from, about sqrt(2 ln n): the luckiest draw."""
    return math.sqrt(2 * math.log(n)) if n > 1 else 0.0


# Student's t at one-sided 97.5 % (the "t >= 2" of a long series) for 1..30 degrees of
# freedom: a slope through 4 noisy evaluations reaches t = 2 by chance about one time in
# ten (df 2), so "a real upward trend" needs the t a sample that small must clear
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_critical(df: int) -> float:
    """The t a least-squares slope with ``df`` degrees of freedom must reach to be a trend
    (one-sided 97.5 %; 2.0 past 30, where the old fixed bar was right)."""
    if df < 1:
        return math.inf
    return _T975[df - 1] if df <= len(_T975) else 2.0


# finite differences of order 2 (coefficients 1, -2, 1) and 3 (-1, 3, -3, 1): the sigma
# of one of them over independent noise of sigma 1 (the root of the sum of the squared
# coefficients)
_DIFF_SIGMA = {2: 6**0.5, 3: 20**0.5}


def eval_noise(raw: list[float]) -> float:
    """One evaluation's noise for both stages: from second differences, and from 6
    evaluations on the smaller of that and the third-difference estimate."""
    noise = _noise(raw)
    return min(noise, _noise(raw, order=3)) if len(raw) >= 6 else noise


def _noise(raw: list[float], order: int = 2) -> float:
    """One evaluation's noise (sigma), from the median absolute difference of ``order``:
    second differences are not inflated by a steady trend, third differences not by the
    bend of a descent that levels off either (second differences read that bend as noise,
    and the early stage asks exactly where a descent levels off). 0 with fewer than 3
    differences to go by."""
    scale = _DIFF_SIGMA[order]
    # the differences written out, summed left to right (the same floats as a sum over the
    # coefficients), in one pass of zip: this runs on every evaluation
    if order == 2:
        d = sorted([abs(a - 2 * b + c) for a, b, c in zip(raw, raw[1:], raw[2:], strict=False)])
    else:
        d = sorted(
            [
                abs(-a + 3 * b - 3 * c + x)
                for a, b, c, x in zip(raw, raw[1:], raw[2:], raw[3:], strict=False)
            ]
        )
    return 1.4826 * d[len(d) // 2] / scale if len(d) >= 3 else 0.0
