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


AMP = 65536.0  # a GradScaler's scale, logged with every step when the probe has the scaler


def test_isolated_grad_overflow_with_finite_loss_is_information_with_a_scaler() -> None:
    # what torch.cuda.amp.GradScaler does on purpose: one inf grad norm, step skipped
    eng = run_engine(Run(gn_at=lambda i, g: INF if i in (400, 900) else g, loss_scale=AMP))
    grads = alerts_of(eng, "nan_grad")
    assert grads and all(a.severity == "info" for a in grads)
    assert grads[0].step == 400 and grads[0].evidence["loss_scaler"] is True
    assert "skipped by the loss scaler" in grads[0].title


def test_isolated_grad_overflow_without_a_scaler_on_record_is_a_warning() -> None:
    """The severity policy: a non-finite value is a warning unless the log shows it needs
    no action. Nothing says the step was skipped (another tool's log, a probe not given
    the scaler): the update may have been applied."""
    eng = run_engine(Run(gn_at=lambda i, g: INF if i == 400 else g))
    (a,) = alerts_of(eng, "nan_grad")
    assert (a.step, a.severity, a.evidence["loss_scaler"]) == (400, "warning", False)
    assert "no loss scaler on record" in a.message and "scaler=" in a.message
    # a config event from the probe saying the run has a scaler is as good as loss_scale
    run = Run(gn_at=lambda i, g: INF if i == 400 else g)
    records = list(run.records())
    records.insert(2, {"kind": "event", "type": "config", "amp": {"scaler": True}})
    from dltop.tui.core.rules import RuleEngine

    eng = RuleEngine()
    eng.feed_many(records)
    (a,) = alerts_of(eng, "nan_grad")
    assert a.severity == "info"


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


def _nan_loss_checklist(eng) -> dict[str, tuple[str | None, str | None]]:  # type: ignore[no-untyped-def]
    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for

    (a,) = alerts_of(eng, "nan_loss")
    return {c.step.id: (c.mark, c.evidence) for c in evaluate(checklist_for(a), eng.facts(), a)}


def test_nan_loss_checklist_reads_the_lr_of_its_own_nan_not_an_earlier_overflow() -> None:
    # an AMP-style overflow at step 3 (lr 0.5, finite loss), the NaN loss at step 252 (lr 1e-4)
    eng = run_engine(
        Run(
            lr=lambda i: 0.5 if i < 10 else 1e-4,
            gn_at=lambda i, g: INF if i == 3 else g,
            loss_at=lambda i, x: NAN if i >= 252 else x,
        )
    )
    assert eng.facts()["first_nonfinite_step"].value == 3  # the run's first, of any kind
    marks = _nan_loss_checklist(eng)
    assert marks["lr_high"] == ("no", "lr = 0.0001 at step 252")


def test_nan_loss_checklist_sees_a_blowup_two_steps_before_the_nan() -> None:
    # the example: grad norm 2.1e5 at step 118, ordinary at 119, NaN loss at 120
    eng = run_engine(
        Run(
            gn_at=lambda i, g: 2.1e5 if i == 118 else g,
            loss_at=lambda i, x: NAN if i >= 120 else x,
        )
    )
    (a,) = alerts_of(eng, "nan_loss")
    assert a.evidence["grad_norm_before"] == 2.1e5 and a.evidence["grad_norm_before_ratio"] > 1e4
    assert _nan_loss_checklist(eng)["grad_blowup"][0] == "yes"
    assert eng.facts()["grad_norm_before_nonfinite_ratio"].value > 1e4
    # and an ordinary run up to the NaN says no
    calm = run_engine(Run(loss_at=lambda i, x: NAN if i >= 120 else x))
    assert _nan_loss_checklist(calm)["grad_blowup"][0] == "no"


def test_amp_start_up_overflows_stay_information() -> None:
    # GradScaler from 2**16: a dozen skipped steps in a row at start-up, then one now and
    # then when the scale grows again; the loss stays finite throughout
    eng = run_engine(
        Run(gn_at=lambda i, g: INF if i < 12 or i in (400, 900) else g, loss_scale=AMP)
    )
    grads = alerts_of(eng, "nan_grad")
    assert grads and all(a.severity == "info" for a in grads), [a.message for a in grads]


def test_overflows_that_persist_with_a_finite_loss_turn_critical() -> None:
    eng = run_engine(Run(gn_at=lambda i, g: INF if 500 <= i < 525 else g, loss_scale=AMP))
    (a,) = [a for a in alerts_of(eng, "nan_grad") if a.severity == "critical"]
    assert a.step == 500 and a.evidence["consecutive"] == 20
    short = run_engine(Run(gn_at=lambda i, g: INF if 500 <= i < 515 else g, loss_scale=AMP))
    assert {a.severity for a in alerts_of(short, "nan_grad")} == {"info"}
    strict = run_engine(
        Run(gn_at=lambda i, g: INF if 500 <= i < 515 else g, loss_scale=AMP),
        {"nan_grad.persist": 3},
    )
    assert "critical" in {a.severity for a in alerts_of(strict, "nan_grad")}
