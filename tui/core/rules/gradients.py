"""Gradient shape from ``layers`` records: vanishing gradients and dead units.

Both are gated on failing progress (the loss is not improving, see
``EngineState.progress_failing``). The published detectors that dropped such a gate
raised these alarms on healthy models: a 1e-3 first/last grad ratio or a layer with 70 %
zero gradients is normal in many networks that learn fine (embeddings, ReLU stacks,
pre-norm transformers). Only when the loss is stuck do they explain something.
"""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Any

from ....probe.schema import Record, as_float, step_or
from ..text.fmt import number as fmt
from .alerts import CRITICAL, INFO, WARNING, Severity
from .base import Rule, Tracker

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

_SPARSE_BY_DESIGN = ("embed", "emb.", "wte", "wpe", "lookup")


def _floats(v: Any, n: int) -> list[float | None]:
    if not isinstance(v, list) or len(v) != n:
        return [None] * n
    return [as_float(x) for x in v]


ALL_ZERO = 0.999  # a layer whose gradient is zero in (almost) every element is dead
NO_GRAD = "No gradient at all"


class LayerGradients(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        v = self.cfg.section("vanishing_grad")
        self.v_on = bool(v["enabled"])
        self.v_ratio = float(v["ratio"])
        self.v_first = float(v["first_norm"])
        self.v_checks = max(1, int(v["checks"]))
        d = self.cfg.section("dead_units")
        self.d_on = bool(d["enabled"])
        self.d_frac = float(d["zero_frac"])
        self.d_checks = max(1, int(d["checks"]))
        self.ng_checks = max(1, int(d["no_grad_checks"]))
        self.vt = Tracker(engine, "vanishing_grad")
        self.dt = Tracker(engine, "dead_units")
        self.v_run = 0
        self.d_run = 0
        self.ng_run = 0
        # latest figures, for facts
        self.first_last_ratio: float | None = None
        self.zero_frac_max: float | None = None
        self.zero_frac_layer: str | None = None
        self.without_grad: list[str] = []
        self.layers_step: int | None = None
        self.net_run = 0  # consecutive checks with most hidden layers' gradient exactly zero
        self.zero_records = max(1, int(d["zero_grad_records"]))
        self.zero_steps = max(1, int(d["zero_grad_steps"]))
        self.zero_run = 0  # consecutive records whose global grad norm is exactly zero
        self.zero_from = 0

    def alert_trackers(self) -> list[Tracker]:
        return [self.vt, self.dt]

    def on_block(self, e: EngineState, b: Block) -> None:
        """The global grad norm exactly zero, record after record: nothing learns at all (a
        loss detached from the graph, a loss of exactly 0, every parameter frozen by hand).
        Critical once it has held `zero_grad_records` records and `zero_grad_steps` steps:
        a few zeros among normal norms are a logging quirk of some trainers."""
        if not self.d_on:
            return
        if self.zero_run == 0 and 0 not in map(dict.get, b.recs, repeat("grad_norm")):
            return  # the usual block: no norm == 0 and no run of them open, nothing to do
        for step, rec in zip(b.steps, b.recs, strict=True):
            gn = rec.get("grad_norm")
            if gn != 0 or isinstance(gn, bool):
                # a nonzero norm ends this alert only (the tracker is shared with dead units)
                a = self.dt.alert
                if self.zero_run and self.dt.active and a is not None and a.title == NO_GRAD:
                    self.dt.clear(step)
                self.zero_run = 0
                continue
            if self.zero_run == 0:
                self.zero_from = step
            self.zero_run += 1
            held = step - self.zero_from + 1
            if self.zero_run >= self.zero_records and held >= self.zero_steps:
                ev = {"records": self.zero_run, "steps": held, "since_step": self.zero_from}
                msg = (
                    f"the global gradient norm is exactly zero on {self.zero_run} records in a "
                    f"row, over {held} steps since step {self.zero_from}: nothing is learning"
                )
                self.dt.fire(self.zero_from, CRITICAL, NO_GRAD, msg, ev, t=e.t)
                self.dt.hold(step)

    def on_layers(self, e: EngineState, rec: Record) -> None:
        names = rec.get("names")
        if not isinstance(names, list) or not names:
            return
        n = len(names)
        norms = _floats(rec.get("grad_norm"), n)
        zero = _floats(rec.get("zero_frac"), n)
        step = step_or(rec, e.last_step)
        self.layers_step = step
        without = self._without_grad(rec.get("no_grad"), names, norms)
        self.without_grad = without
        weights = [i for i, name in enumerate(names) if str(name).endswith("weight")] or list(
            range(n)
        )
        self._vanishing(e, step, names, norms, weights)
        self._dead(e, step, names, norms, zero, weights, without)

    @staticmethod
    def _without_grad(ng: Any, names: list[Any], norms: list[float | None]) -> list[str]:
        out: list[str] = []
        if isinstance(ng, list):
            if len(ng) == len(names) and all(isinstance(x, bool) for x in ng):
                out = [str(nm) for nm, flag in zip(names, ng, strict=True) if flag]
            else:
                out = [str(x) for x in ng if isinstance(x, str)]
        return out  # a gradient of exactly zero is a gradient: dead, not missing

    def _vanishing(
        self,
        e: EngineState,
        step: int | None,
        names: list[Any],
        norms: list[float | None],
        w: list[int],
    ) -> None:
        first, last = norms[w[0]], norms[w[-1]]
        if first is None or last is None or not (last > 0) or first != first or len(w) < 2:
            self.first_last_ratio = None
            return
        ratio = first / last
        self.first_last_ratio = ratio
        if not self.v_on:
            return
        if ratio < self.v_ratio and first < self.v_first:
            self.v_run += 1
        else:
            self.v_run = 0
            if self.vt.active:
                self.vt.clear(step)
            return
        if self.v_run >= self.v_checks and e.fig.progress_failing:
            ev = {
                "first_layer": str(names[w[0]]),
                "last_layer": str(names[w[-1]]),
                "first_grad_norm": first,
                "last_grad_norm": last,
                "ratio": ratio,
                "checks": self.v_run,
                "loss_last": e.fig.loss_blocks[-1] if e.fig.loss_blocks else None,
                "loss_first": e.fig.loss_first,
            }
            msg = (
                f"first-layer grad norm {fmt(first)} = {fmt(ratio)}x the last layer's ({fmt(last)}) "
                f"for {self.v_run} checks while the loss is not improving"
            )
            self.vt.fire(step, WARNING, "Vanishing gradients", msg, ev, t=e.last_t, refresh=True)

    def _dead(
        self,
        e: EngineState,
        step: int | None,
        names: list[Any],
        norms: list[float | None],
        zero: list[float | None],
        w: list[int],
        without: list[str],
    ) -> None:
        worst, worst_name = None, None
        dead: list[str] = []
        hidden: list[str] = []  # weight layers but the output one, sparse-by-design excluded
        all_zero: list[str] = []  # ... whose gradient is exactly zero in every element
        for i in w:
            name = str(names[i])
            if any(s in name.lower() for s in _SPARSE_BY_DESIGN):
                continue
            z = zero[i]
            if norms[i] == 0.0:
                z = 1.0
            if z is None:
                continue
            if i != w[-1]:
                hidden.append(name)
                if z >= ALL_ZERO:
                    all_zero.append(name)
            if worst is None or z > worst:
                worst, worst_name = z, name
            if z >= self.d_frac:
                dead.append(name)
        self.zero_frac_max, self.zero_frac_layer = worst, worst_name
        self.d_run = self.d_run + 1 if dead else 0
        if self._dead_network(e, step, hidden, all_zero, without):
            return
        self.ng_run = self.ng_run + 1 if without else 0
        if not self.d_on:
            return
        failing = e.fig.progress_failing
        if dead and self.d_run >= self.d_checks and failing:
            ev = {
                "layer": worst_name,
                "zero_frac": worst,
                "dead_layers": dead,
                "checks": self.d_run,
                "layers_without_grad": without,
            }
            msg = (
                f"{fmt(100 * (worst or 0.0))} % of the gradient of {worst_name} is exactly zero "
                f"({len(dead)} layer(s) >= {fmt(100 * self.d_frac)} %) for {self.d_run} checks "
                "while the loss is not improving"
            )
            self.dt.fire(step, WARNING, "Dead units", msg, ev, t=e.last_t, refresh=True)
        elif without and self.ng_run >= self.ng_checks:
            sev: Severity = WARNING if failing else INFO
            ev = {"layers_without_grad": without, "count": len(without), "checks": self.ng_run}
            shown = ", ".join(without[:3]) + (
                f" (+{len(without) - 3} more)" if len(without) > 3 else ""
            )
            msg = f"{len(without)} trainable parameter(s) get no gradient: {shown}"
            if failing:
                msg += "; the loss is not improving"
            self.dt.fire(
                step, sev, "Parameters without gradient", msg, ev, t=e.last_t, refresh=True
            )
        elif self.dt.active and not dead and not without:
            self.dt.clear(step)

    def _dead_network(
        self,
        e: EngineState,
        step: int | None,
        hidden: list[str],
        all_zero: list[str],
        without: list[str],
    ) -> bool:
        """Most hidden layers get a gradient of exactly zero, check after check: a dead
        network (every ReLU off after a too-high lr or a bad init), not a few dead units.

        Critical when every hidden layer is dead: nothing before the output layer can learn,
        whatever the loss does. A warning when most are and the loss is flat now (the recent
        gain alone: a blow-up in the first steps must not make the total gain look good).
        Returns True when it raised (the dead-units wording would say less).
        """
        most = len(hidden) >= 1 and 2 * len(all_zero) > len(hidden)
        self.net_run = self.net_run + 1 if most else 0
        if not self.d_on or not most or self.net_run < self.d_checks:
            return False
        every = len(all_zero) == len(hidden)
        if not every and not e.fig.progress_stalled:
            return False
        sev: Severity = CRITICAL if every else WARNING
        ev = {
            "dead_layers": all_zero,
            "hidden_layers": len(hidden),
            "checks": self.net_run,
            "layers_without_grad": without,
            "loss_last": e.fig.loss_blocks[-1] if e.fig.loss_blocks else None,
            "loss_first": e.fig.loss_first,
            "lr": e.lr,
        }
        shown = ", ".join(all_zero[:3]) + (
            f" (+{len(all_zero) - 3} more)" if len(all_zero) > 3 else ""
        )
        what = "every hidden layer" if every else f"{len(all_zero)} of {len(hidden)} hidden layers"
        msg = (
            f"the gradient of {what} is exactly zero for {self.net_run} checks ({shown}): "
            "those layers cannot learn (dead ReLUs after a too-high lr or a bad init?)"
        )
        self.dt.fire(step, sev, "Dead network", msg, ev, t=e.last_t, refresh=True)
        return True
