"""The severity policy (docs/alerts.md), one rule for every alert: a fault that leaves the
run broken is at least a warning; what needs no action is information. Each case is a
run that is broken in one way (or healthy in one way) and nothing else, through the whole
engine, so a rule that words its severity differently from the policy fails here."""

from __future__ import annotations

import math
from typing import Any

import pytest
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.alerts import SEVERITY_RANK
from rulekit import Run, run_engine


def _worst(eng: RuleEngine, alert_id: str) -> str | None:
    sev = [a.severity for a in eng.alerts() if a.id == alert_id]
    return max(sev, key=SEVERITY_RANK.__getitem__) if sev else None


def _fed(records: list[dict[str, Any]]) -> RuleEngine:
    eng = RuleEngine(Config.load())
    eng.feed_many(records)
    eng.finish()
    return eng


def _evals(evals: list[float], train: list[float]) -> list[dict[str, Any]]:
    """Evaluated once an epoch of 10 logged steps."""
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    step = 0
    for ev, tr in zip(evals, train, strict=True):
        for _ in range(10):
            step += 10
            recs.append({"kind": "step", "step": step, "t": float(step), "loss": tr})
        recs.append({"kind": "eval", "step": step, "t": step + 0.5, "loss": ev})
    recs.append({"kind": "event", "type": "exit", "status": "ok", "t": step + 1.0})
    return recs


BROKEN = {
    # diverged and stayed up: 5x its level from step 400 on
    "diverged": (Run(loss_at=lambda i, x: x * (5 if i >= 400 else 1)), "divergence"),
    # never learned: a loss that sits where it started for the whole run
    "never_learned": (Run(tau=1e9, noise=0.05), "plateau"),
    # the eval loss NaN at every evaluation, the train loss fine
    "nan_eval": (Run(eval_every=100, eval_at=lambda i, x: math.nan), "nan_metric"),
    # a grad norm Inf with a finite loss and no loss scaler on record
    "nan_grad_no_scaler": (Run(gn_at=lambda i, g: math.inf if i == 600 else g), "nan_grad"),
    # the loss exactly 0 from step 20 on
    "zero_loss": (Run(loss_at=lambda i, x: 0.0 if i >= 20 else x), "loss_collapsed"),
    # the loss repeats one value to the last digit
    "constant_loss": (Run(loss_at=lambda i, x: 0.6931471805599453), "loss_collapsed"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_fault_that_leaves_the_run_broken_is_at_least_a_warning(name: str) -> None:
    run, alert_id = BROKEN[name]
    worst = _worst(run_engine(run), alert_id)
    assert worst in ("warning", "critical"), (name, worst)


def test_a_large_rise_in_few_evaluations_is_a_warning() -> None:
    """Four evaluations, the last two 25 % above the best, the train loss falling."""
    eng = _fed(_evals([0.53, 0.42, 0.48, 0.53], [0.9, 0.6, 0.4, 0.3]))
    assert _worst(eng, "overfitting") == "warning"


NO_ACTION = {
    # one loss spike the run absorbed, after the baseline settled
    "absorbed_loss_spike": (Run(loss_at=lambda i, x: x * 40 if i == 500 else x), "loss_spike"),
    # one grad-norm spike the loss ignores: before step 100 and after it alike
    "lone_grad_spike_early": (Run(gn_at=lambda i, g: g * 60 if i == 80 else g), "grad_explosion"),
    "lone_grad_spike_late": (Run(gn_at=lambda i, g: g * 60 if i == 700 else g), "grad_explosion"),
    # an AMP overflow the loss scaler skipped (the log shows the scaler)
    "amp_overflow": (
        Run(gn_at=lambda i, g: math.inf if i in (5, 600) else g, loss_scale=65536.0),
        "nan_grad",
    ),
    # a plateau after the loss shed most of its start: convergence
    "converged": (Run(tau=60, steps=1500), "plateau"),
}


@pytest.mark.parametrize("name", sorted(NO_ACTION))
def test_what_needs_no_action_is_information(name: str) -> None:
    run, alert_id = NO_ACTION[name]
    assert _worst(run_engine(run), alert_id) == "info", name


def test_a_handled_exception_is_information() -> None:
    run = Run(steps=300)
    records = list(run.records())
    at = next(i for i, r in enumerate(records) if r.get("step") == 100 and r["kind"] == "step")
    exc = {"kind": "event", "type": "exception", "exc_type": "ValueError", "message": "x"}
    records.insert(at + 1, dict(exc, step=100, t=records[at]["t"]))
    eng = _fed(records)
    (a,) = [a for a in eng.alerts() if a.id == "crash"]
    assert a.severity == "info" and a.evidence["handled"] is True


def test_a_healthy_run_has_no_warning() -> None:
    eng = run_engine(Run(eval_every=100))
    loud = [a for a in eng.alerts() if a.severity != "info"]
    assert loud == [], [(a.id, a.message) for a in loud]
