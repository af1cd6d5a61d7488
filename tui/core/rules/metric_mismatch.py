"""The eval loss improves a lot while no task metric improves at all.

Why a rule: the loss and the metric a user reports are computed from the same outputs,
so they move together on a task that is learned. When the eval loss falls by half or more
and accuracy, F1, WER or BLEU never get better than at the first evaluation, the two no
longer measure the same thing: a metric computed on the wrong labels or on padding, a
generation set-up that outputs nothing useful (a speech model whose WER sits at 99 %
while its loss falls ninefold), or an evaluation set so easy or so leaked that accuracy
is exactly 1.0 from the first evaluation. Only metrics whose direction is known by name
are read (the table below); a metric that later improves withdraws the alert.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ....probe.schema import Record, as_float, step_or
from ..text.fmt import number as fmt
from .alerts import WARNING
from .base import Rule, Tracker
from .evals import MAX_EVAL_SETS, MAX_SET_NAME

if TYPE_CHECKING:
    from .state import EngineState

# words of a metric's name that say which way is better (the name split at anything not a
# letter or digit, lower case: ``eval_rouge-1`` -> eval, rouge, 1); a word that starts with
# one of PREFIX_HIGHER counts too (rouge1, rougeLsum, bleu4)
HIGHER_WORDS = frozenset(
    [
        "accuracy",
        "acc",
        "f1",
        "precision",
        "recall",
        "bleu",
        "rouge",
        "auc",
        "auroc",
        "map",
        "iou",
        "miou",
        "dice",
        "matthews",
        "mcc",
        "top1",
        "top5",
        "spearman",
        "pearson",
        "exact",
    ]
)
PREFIX_HIGHER = ("rouge", "bleu")
LOWER_WORDS = frozenset(["wer", "cer", "perplexity", "ppl", "error", "err", "mae", "mse", "rmse"])
_WORDS = re.compile(r"[^a-z0-9]+")


_KNOWN: dict[str, int] = {}  # directions of names already seen (eval records repeat theirs)


def direction(name: str) -> int:
    """+1 when larger is better, -1 when smaller is better, 0 when the name does not say
    (or names a loss, the other side of the comparison)."""
    sign = _KNOWN.get(name)
    if sign is None:
        sign = _direction(name)
        if len(_KNOWN) < 1024:
            _KNOWN[name] = sign
    return sign


def _direction(name: str) -> int:
    words = [w for w in _WORDS.split(name.lower()) if w]
    if "loss" in words:
        return 0
    if any(w in HIGHER_WORDS or w.startswith(PREFIX_HIGHER) for w in words):
        return 1
    if any(w in LOWER_WORDS for w in words):
        return -1
    return 0


class _Metric:
    __slots__ = ("sign", "first", "last", "count", "improved")

    def __init__(self, sign: int, value: float) -> None:
        self.sign = sign
        self.first = value
        self.last = value
        self.count = 1
        self.improved = False

    def add(self, value: float) -> None:
        self.count += 1
        self.last = value
        if (value - self.first) * self.sign > 0:
            self.improved = True


class MetricMismatch(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("metric_mismatch")
        self.drop = float(c["loss_drop"])
        self.min_evals = max(2, int(c["min_evals"]))
        self.metrics: dict[str, _Metric] = {}
        self.tr = Tracker(engine, "metric_mismatch")

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_eval(self, e: EngineState, rec: Record) -> None:
        for key, value in rec.items():
            if not isinstance(key, str) or type(value) is bool:
                continue
            name = key[:MAX_SET_NAME]
            m = self.metrics.get(name)
            if m is None and len(self.metrics) >= 2 * MAX_EVAL_SETS:
                continue
            sign = m.sign if m is not None else direction(name)
            f = as_float(value) if sign else None
            if f is None or f - f != 0.0:
                continue
            if m is None:
                self.metrics[name] = _Metric(sign, f)
            else:
                m.add(f)
        if self.on and self.metrics:
            self._judge(e, step_or(rec, e.last_step))

    def _judge(self, e: EngineState, step: int | None) -> None:
        read = [(n, m) for n, m in self.metrics.items() if m.count >= 2]
        if any(m.improved for _, m in read):
            if self.tr.alert is not None:
                self.tr.retract()  # a metric moved: it does follow the loss after all
            return
        losses = [x for _, x in e.fig.evals.evals]
        full = [(n, m) for n, m in read if m.count >= self.min_evals]
        if len(losses) < self.min_evals or not full or not losses[0] > 0:
            return
        best = min(losses)
        fell = (losses[0] - best) / losses[0]
        if fell < self.drop:
            return
        shown = "; ".join(f"{n[:40]} {fmt(m.first)} -> {fmt(m.last)}" for n, m in full[:4])
        ev: dict[str, Any] = {
            "eval_loss_first": losses[0],
            "eval_loss_best": best,
            "eval_loss_drop": fell,
            "metrics": {n[:40]: [m.first, m.last] for n, m in full[:8]},
            "metric_first_values_perfect": all(
                m.sign > 0 and m.first in (1.0, 100.0) for _, m in full
            ),
            "evaluations": len(losses),
        }
        msg = (
            f"eval loss fell {fmt(losses[0])} -> {fmt(best)} ({fmt(100 * fell)} % lower) over "
            f"{len(losses)} evaluations while no metric got better than at the first: {shown}"
        )
        self.tr.fire(
            step, WARNING, "Eval metric does not follow the loss", msg, ev, t=e.last_t, refresh=True
        )
        self.tr.hold(step)
