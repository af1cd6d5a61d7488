"""NaN/Inf in the loss or the global grad norm: flagged on the very step, no warm-up.

A non-finite loss is always critical. A non-finite grad norm with a finite loss is what
an AMP ``GradScaler`` produces on purpose when it probes a too-large scale (it then skips
the step and halves the scale; from its initial scale of 2**16 that can take a dozen
skipped steps in a row at start-up). So an overflow is information **when the log shows
a loss scaler** (a step's ``loss_scale``, or a ``config`` event with ``amp.scaler``):
the step was skipped on purpose. Without one, nothing says the step was skipped rather
than applied: a warning (the severity policy: a non-finite value is at least a warning
unless it is known to need no action; another tool's log never says). Either way it is
critical when it persists ``persist`` (20) steps in a row or the loss follows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..text.fmt import number as fmt
from .alerts import CRITICAL, INFO, WARNING, Severity
from .base import Rule, Tracker, held_steps
from .window import median_of

if TYPE_CHECKING:
    from .state import EngineState

GRAD_BEFORE_STEPS = 20  # how far back a NaN looks for the grad-norm blow-up that caused it


def grad_before(e: EngineState) -> tuple[float | None, float | None]:
    """The largest finite grad norm of the ~20 steps up to this one, and its ratio to the
    median of the grad norms before those (``None`` without 5 of them).

    Called on a NaN/Inf step: "did the gradients blow up first?". The single previous
    value is not enough (a norm of 2e5 two steps before the NaN, then an ordinary one),
    and the rolling median would already contain the blow-up.
    """
    vals = list(e.fig.gn_win)
    vals.extend(x for x in e.blk.gn if x is not None)
    if e.gn_finite and e.gn is not None:
        vals.append(e.gn)
    if not vals:
        return None, None
    recent, earlier = vals[-GRAD_BEFORE_STEPS:], vals[:-GRAD_BEFORE_STEPS]
    peak = max(recent)
    base = median_of(earlier) if len(earlier) >= 5 else None
    return peak, (peak / base if base else None)


class NonFinite(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        self.loss_on = self.cfg.enabled("nan_loss")
        self.grad_on = self.cfg.enabled("nan_grad")
        self.loss_clear = int(self.cfg.section("nan_loss")["clear_after"])
        g = self.cfg.section("nan_grad")
        self.grad_clear = int(g["clear_after"])
        self.persist = max(1, int(g["persist"]))
        self.loss_t = Tracker(engine, "nan_loss")
        self.grad_t = Tracker(engine, "nan_grad")
        self.loss_bad = 0  # non-finite losses in the current episode
        self.loss_good_run = 0  # finite losses since the last non-finite one
        self.grad_run = 0  # consecutive non-finite grad norms
        self.grad_run_from = 0  # the step the current run of them began
        self.grad_bad = 0
        self.grad_good_run = 0
        self.overflows = 0  # isolated overflow episodes (AMP-like)
        # grad_before() when the current run of non-finite grad norms began
        self.grad_before_run: tuple[float | None, float | None] = (None, None)
        self.watching = False  # an episode is open: finite steps count towards ending it

    def alert_trackers(self) -> list[Tracker]:
        return [self.loss_t, self.grad_t]

    def handled(self, e: EngineState) -> bool:
        """A loss scaler is on record (the step's ``loss_scale``, or the probe's config
        event): a non-finite grad norm is a skipped step."""
        return e.setup.loss_scaler is True or "loss_scale" in e.rec

    def finite(self, e: EngineState, lf: bool, gf: bool) -> None:
        """A step with a finite loss and/or grad norm: counts towards ending an episode."""
        self.watching = self.loss_t.active or self.grad_t.active or self.grad_run > 0
        if lf:
            self.loss_good_run += 1
            if self.loss_good_run >= self.loss_clear and self.loss_t.active:
                self.loss_t.clear(e.step)
        if gf:
            self.grad_run = 0
            self.grad_good_run += 1
            if self.grad_good_run >= self.grad_clear and self.grad_t.active:
                self.grad_t.clear(e.step)

    def on_loss_nonfinite(self, e: EngineState) -> None:
        self.watching = True
        if self.loss_on:
            self._loss_nonfinite(e, e.loss)  # type: ignore[arg-type]

    def on_grad_nonfinite(self, e: EngineState) -> None:
        self.watching = True
        if self.grad_on:
            self._grad_nonfinite(e, e.gn)  # type: ignore[arg-type]

    def _loss_nonfinite(self, e: EngineState, loss: float) -> None:
        if not self.loss_t.active:
            self.loss_bad = 0
        self.loss_bad += 1
        self.loss_good_run = 0
        med = e.fig.loss_med
        ev = {
            "loss": loss,
            "nonfinite_steps": self.loss_bad,
            "lr": e.lr,
            "grad_norm": e.gn,
            "last_finite_loss": self._last_finite_loss(e),
            "loss_median": med,
        }
        if self.loss_bad == 1:  # the episode's first step: what led to it (checklist evidence)
            peak, ratio = grad_before(e)
            ev["grad_norm_before"] = peak
            ev["grad_norm_before_ratio"] = ratio
        what = "NaN" if loss != loss else ("Inf" if loss > 0 else "-Inf")
        first = self.loss_t.alert.step if self.loss_t.active and self.loss_t.alert else e.step
        msg = f"loss is {what} at step {e.step}"
        if self.loss_bad > 1:
            msg = f"loss non-finite on {self.loss_bad} steps since step {first}"
        if ev["last_finite_loss"] is not None:
            msg += f" (last finite loss {fmt(ev['last_finite_loss'])}"
            msg += f", lr {fmt(e.lr)})" if e.lr is not None else ")"
        self.loss_t.fire(
            e.step, CRITICAL, f"Loss is {what}", msg, ev, t=e.t, refresh=self.loss_bad <= 1
        )
        self.loss_t.revise({"nonfinite_steps": self.loss_bad})

    @staticmethod
    def _last_finite_loss(e: EngineState) -> float | None:
        for x in reversed(e.blk.loss):
            if x is not None:
                return x
        return e.fig.loss_win[-1] if e.fig.loss_win else None

    def _grad_nonfinite(self, e: EngineState, gn: float) -> None:
        if not self.grad_t.active:
            self.grad_bad = 0
        self.grad_bad += 1
        self.grad_run += 1
        self.grad_good_run = 0
        if self.grad_run == 1:
            self.grad_before_run = grad_before(e)
            self.grad_run_from = e.step
        # how long in steps, not records: a log written every 50 steps holding two
        # non-finite grad norms in a row has had them for 50 steps or more
        held = held_steps(self.grad_run, self.grad_run_from, e.step)
        what = "NaN" if gn != gn else "Inf"
        ev = {
            "grad_norm": gn,
            "loss": e.loss,
            "consecutive": self.grad_run,
            "nonfinite_steps": self.grad_bad,
            "lr": e.lr,
            "last_finite_grad_norm": e.last_finite_gn,
            "grad_norm_median": e.fig.gn_med,
            "grad_norm_before": self.grad_before_run[0],
            "grad_norm_before_ratio": self.grad_before_run[1],
        }
        loss_ok = e.loss is None or e.loss_finite  # an unlogged loss is no sign of trouble
        if loss_ok and held < self.persist:
            # a finite loss and an isolated overflow: what AMP loss scaling does on purpose,
            # information when the log shows the scaler, a warning when nothing says so
            if self.grad_run == 1:
                self.overflows += 1
            ev["overflow_episodes"] = self.overflows
            handled = self.handled(e)
            sev: Severity
            ev["loss_scaler"] = handled
            said = f"a finite loss {fmt(e.loss)}" if e.loss is not None else "no loss logged"
            run = f" ({self.grad_run} in a row)" if self.grad_run > 1 else ""
            if handled:
                msg = (
                    f"grad norm {what} at step {e.step}{run} with {said}: the loss scaler "
                    f"skips the step; critical if it persists {self.persist} steps or the "
                    "loss follows"
                )
                title, sev = "Gradient overflow (step skipped by the loss scaler)", INFO
            else:
                msg = (
                    f"grad norm {what} at step {e.step}{run} with {said}, and no loss scaler "
                    "on record: nothing says the step was skipped (with an AMP GradScaler, "
                    f"pass scaler= to the Probe); critical if it persists {self.persist} "
                    "steps or the loss follows"
                )
                title, sev = f"Gradient norm is {what}", WARNING
            self.grad_t.fire(e.step, sev, title, msg, ev, t=e.t)
            return
        base = f"grad norm {what} at step {e.step}"
        if self.grad_run > 1:
            base = (
                f"grad norm non-finite on {self.grad_run} records in a row over {held} steps "
                f"(step {e.step})"
                if held > self.grad_run
                else f"grad norm non-finite for {self.grad_run} steps in a row (step {e.step})"
            )
        if e.last_finite_gn is not None:
            med = e.fig.gn_med
            base += f"; last finite {fmt(e.last_finite_gn)}"
            if med:
                base += f" = {fmt(e.last_finite_gn / med)}x the recent median"
        self.grad_t.fire(e.step, CRITICAL, f"Gradient norm is {what}", base, ev, t=e.t)
