"""NaN/Inf in any other logged metric: an evaluation's loss or score, a step's extra, the lr.

Why apart from ``nonfinite.py``: the loss and the grad norm are judged on their very step,
with AMP's skipped steps in mind. Everything else a run logs (``eval`` records, the
``acc`` of ``probe.step(loss=loss, acc=acc)``, a Trainer's ``eval_*`` metrics, another
tool's validation columns) has no such excuse: a NaN eval loss means the evaluation, or
the model on held-out data, is broken, and nothing else in the log says so (the train
loss can stay finite throughout). The severity policy makes it a warning.

Read once per block of steps (the records are in the block) and on each eval record;
only floats are looked at, so a record costs a pass over its values and nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ....probe.schema import Record, Records, step_or
from .alerts import INFO, WARNING, Severity
from .base import Rule, Tracker

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

# the step fields with rules of their own, and a record's identity
_STEP_OWN = frozenset({"kind", "step", "t", "loss", "grad_norm"})
_EVAL_OWN = frozenset({"kind", "step", "t"})
MAX_METRICS = 16  # metrics followed (names come from the log: any number of them)
MAX_NAME = 80  # characters of a metric's name kept
_DONE_MAX = 4 * MAX_METRICS + 8  # names the fast path remembers (ever_finite's bound + own)
_FloatOf = Callable[[str], float]  # a record's lookup, for names whose values are floats


class _Seen:
    """One metric's non-finite values: how many, where first and last, and whether its
    latest value is still non-finite."""

    __slots__ = ("bad", "total", "first", "last", "now", "value")

    def __init__(self) -> None:
        self.bad = self.total = 0
        self.first: int | None = None
        self.last: int | None = None
        self.now = False
        self.value = ""


def _all_skipped(recs: Records, done: set[str]) -> bool:
    """Whether every record of the block is one ``on_block`` would skip: no float under a
    name not yet in ``done``, every float finite. One pass over the block's values, not
    one set per record: a NaN or an Inf makes the block's sum NaN or Inf, and a sum that
    overflows only sends the block the per-record way, where each record is judged on its
    own (so how the sum is rounded cannot change an answer). A plain loop: a set
    difference per record and a second pass for the sum cost 2.6x as much."""
    total = 0.0
    for rec in recs:
        for k, v in rec.items():
            if type(v) is float:
                if k not in done:
                    return False
                total += v
    return total - total == 0.0


def _word(x: float) -> str:
    return "NaN" if x != x else ("Inf" if x > 0 else "-Inf")


class NonFiniteMetrics(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        self.settings("nan_metric")
        self.tr = Tracker(engine, "nan_metric")
        self.seen: dict[str, _Seen] = {}
        # metrics with a finite value before any NaN (bounded: names come from the log)
        self.ever_finite: set[str] = set()
        self.evals = 0  # eval records read
        # step fields whose finite values change nothing any more: the step's own, and
        # those already in ``ever_finite`` (the fast path of ``on_block``; bounded)
        self.done: set[str] = set()

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, b: Block) -> None:
        if not self.on:
            return
        done = self.done
        quiet = not self.seen and not self.tr.active
        if quiet and _all_skipped(b.recs, done):
            return
        for step, rec in zip(b.steps, b.recs, strict=True):
            # the common record: no metric bad so far, every float finite (their sum is: a
            # NaN or an Inf would make it NaN or Inf), each float's name one of the step's
            # own or already in ``ever_finite``. Reading it would change nothing: skipped.
            # Any other record, or a sum that overflowed, takes the exact path.
            floats = {k for k, v in rec.items() if type(v) is float}
            if quiet and floats <= done:
                total = sum(map(cast(_FloatOf, rec.__getitem__), floats))
                if total - total == 0.0:
                    continue
            self._record(e, rec, step, "")
            quiet = not self.seen and not self.tr.active
            if len(done) < _DONE_MAX:
                ever = self.ever_finite
                done.update(k for k in floats if k in _STEP_OWN or k[:MAX_NAME] in ever)

    def on_eval(self, e: EngineState, rec: Record) -> None:
        self.evals += 1
        if not self.on:
            return
        self._record(e, rec, step_or(rec, e.last_step), "eval.")

    def _record(self, e: EngineState, rec: Record, step: int | None, prefix: str) -> None:
        bad: list[tuple[str, float]] = []
        own = _EVAL_OWN if prefix else _STEP_OWN
        for k, v in rec.items():
            if type(v) is not float or k in own:
                continue
            name = (prefix + k)[:MAX_NAME]
            known = self.seen.get(name)
            if v - v == 0.0:  # finite
                if known is not None:
                    first_finite = known.total == known.bad
                    known.total += 1
                    if first_finite and self.tr.active:
                        # NaN until now, finite from here: it was broken, not never computed
                        self._fire(e, step)
                    known.now = False
                elif len(self.ever_finite) < 4 * MAX_METRICS:
                    self.ever_finite.add(name)
                continue
            if known is None:
                if len(self.seen) >= MAX_METRICS:
                    continue
                self.seen[name] = _Seen()
            bad.append((name, v))
        for name, v in bad:
            s = self.seen[name]
            s.bad += 1
            s.total += 1
            s.now = True
            s.value = _word(v)
            if s.first is None:
                s.first = step
            s.last = step
        if bad:
            self._fire(e, step)
        elif self.tr.active and not any(s.now for s in self.seen.values()):
            self.tr.clear(step)

    def _fire(self, e: EngineState, step: int | None) -> None:
        worst = [(n, s) for n, s in self.seen.items() if s.bad]
        worst.sort(key=lambda ns: -ns[1].bad)
        parts = []
        for name, s in worst[:3]:
            where = "evaluations" if name.startswith("eval.") else "steps"
            shown = "eval loss" if name == "eval.loss" else name
            span = f"step {s.first}" if s.first == s.last else f"steps {s.first}-{s.last}"
            parts.append(f"{shown} {s.value} at {s.bad} of {s.total} {where} ({span})")
        more = f" and {len(worst) - 3} more" if len(worst) > 3 else ""
        finite = e.loss_finite or e.loss is None
        tail = "; the train loss is finite" if finite and e.fig.loss_seen else ""
        msg = "; ".join(parts) + more + tail
        name0, s0 = worst[0]
        ev: dict[str, Any] = {
            "metric": name0,
            "value": s0.value,
            "nonfinite": s0.bad,
            "of": s0.total,
            "first_step": s0.first,
            "metrics": {n: s.bad for n, s in worst[:MAX_METRICS]},
        }
        if e.loss is not None:
            ev["train_loss_finite"] = e.loss_finite
        if name0 == "eval.loss":
            title = f"Eval loss is {s0.value}"
        elif name0.startswith("eval."):
            title = f"Eval metric {name0[5:]} is {s0.value}"
        else:
            title = f"Metric {name0} is {s0.value}"
        # a metric that was never finite, and is not a loss, is the metric's own code (a
        # 0/0 over an empty set, a field never filled) and says nothing of the training:
        # information. A loss, or a metric that was finite and went bad, is a warning.
        broken = any(
            s.total > s.bad or n in self.ever_finite or "loss" in n.lower() for n, s in worst
        )
        if not broken:
            msg += "; never finite, so the metric's own computation, not the training, is at fault"
        sev: Severity = WARNING if broken else INFO
        self.tr.fire(s0.first, sev, title, msg, ev, t=e.last_t, refresh=True)
        self.tr.hold(step)
