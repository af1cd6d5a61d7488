"""NaN/Inf rules: flagged on the very step, AMP-style overflows kept apart from real NaNs."""

from __future__ import annotations

import math

from rulekit import Run, alerts_of, run_engine

NAN, INF = math.nan, math.inf


def test_nan_loss_is_critical_on_its_step() -> None:
    eng = run_engine(Run(loss_at=lambda i, x: NAN if i >= 437 else x))
    (a,) = alerts_of(eng, "nan_loss")
    assert (a.step, a.severity, a.active) == (437, "critical", True)
    assert a.evidence["raised_at_step"] == 437
    assert math.isnan(a.evidence["loss"]) and a.evidence["lr"] == 0.1
    assert a.evidence["nonfinite_steps"] == 1000 - 437
    assert "NaN at step 437" in a.message
    facts = eng.facts()
    assert facts["first_nonfinite_step"].value == 437
    assert facts["lr_at_first_nonfinite"].value == 0.1


def test_nan_loss_at_step_zero_needs_no_warmup() -> None:
    eng = run_engine(Run(steps=30, loss_at=lambda i, x: INF if i == 0 else x))
    (a,) = alerts_of(eng, "nan_loss")
    assert a.step == 0 and "Inf" in a.title
    assert a.active is False  # 20 finite losses followed: the episode ended


def test_a_few_nonfinite_losses_close_together_are_one_alert() -> None:
    eng = run_engine(Run(loss_at=lambda i, x: NAN if i in (300, 305, 311) else x))
    (a,) = alerts_of(eng, "nan_loss")
    assert a.step == 300 and a.last_step == 311


def test_isolated_grad_overflow_with_finite_loss_is_information() -> None:
    # what torch.cuda.amp.GradScaler does on purpose: one inf grad norm, step skipped
    eng = run_engine(Run(gn_at=lambda i, g: INF if i in (400, 900) else g))
    grads = alerts_of(eng, "nan_grad")
    assert grads and all(a.severity == "info" for a in grads)
    assert grads[0].step == 400


def test_persisting_nonfinite_grad_is_critical_from_its_first_step() -> None:
    eng = run_engine(Run(gn_at=lambda i, g: NAN if i >= 400 else g))
    (a,) = alerts_of(eng, "nan_grad")
    assert (a.step, a.severity) == (400, "critical")
    assert a.evidence["consecutive"] >= 3


def test_nan_grad_with_nan_loss_is_critical_at_once() -> None:
    eng = run_engine(
        Run(gn_at=lambda i, g: NAN if i >= 500 else g, loss_at=lambda i, x: NAN if i >= 500 else x)
    )
    got = {(a.id, a.step, a.severity) for a in eng.alerts()}
    assert got == {("nan_grad", 500, "critical"), ("nan_loss", 500, "critical")}
