"""Plateau, oscillation, overfitting: windowed judgements of progress."""

from __future__ import annotations

import math

import pytest
from dltop.tui.core.rules import RuleEngine
from rulekit import Run, alerts_of, lr_constant, lr_warmup_cosine, noisy, run_engine


def test_plateau_from_the_start_is_a_warning() -> None:
    eng = run_engine(Run(tau=1e9, noise=0.05))
    (a,) = alerts_of(eng, "plateau")
    assert a.severity == "warning" and a.step == 0
    assert a.evidence["raised_at_step"] <= 250
    assert abs(a.evidence["total_improvement"]) < 0.1


def test_plateau_after_convergence_is_information() -> None:
    eng = run_engine(Run(tau=60, steps=1500))
    plateaus = alerts_of(eng, "plateau")
    assert plateaus and all(a.severity == "info" for a in plateaus)
    assert plateaus[0].evidence["total_improvement"] > 0.5


def test_no_plateau_while_lr_is_zero_or_warming_up() -> None:
    assert alerts_of(run_engine(Run(tau=1e9, lr=lr_constant(0.0))), "plateau") == []
    flat_warmup = Run(tau=1e9, steps=600, lr=lr_warmup_cosine(0.1, warmup=600, total=1000))
    assert alerts_of(run_engine(flat_warmup), "plateau") == []


def test_rising_loss_is_not_a_plateau() -> None:
    eng = run_engine(Run(tau=1e9, loss_at=lambda i, x: x * (1 + i / 300)))
    assert alerts_of(eng, "plateau") == []


def test_slow_waves_are_oscillation() -> None:
    def waves(i: int, x: float) -> float:
        return x * (1 + 0.8 * math.sin(2 * math.pi * i / 24)) if i >= 300 else x

    eng = run_engine(Run(loss_at=waves, noise=0.05))
    (a,) = alerts_of(eng, "oscillation")
    assert a.severity == "warning" and a.evidence["swings"] >= 6
    assert 300 <= a.evidence["raised_at_step"] <= 420


def test_two_cycle_is_oscillation() -> None:
    eng = run_engine(
        Run(loss_at=lambda i, x: x * (1.6 if i % 2 else 0.6) if i >= 300 else x, noise=0.05)
    )
    (a,) = alerts_of(eng, "oscillation")
    assert a.evidence["lag1_autocorr"] <= -0.6


def overfit(i: int, x: float) -> float:
    return 0.5 + 0.001 * max(0, i - 400)  # held-out loss turns up at step 400


def test_overfitting_after_three_rising_evaluations() -> None:
    eng = run_engine(
        Run(steps=1500, tau=400, floor=0.05, eval_every=50, eval_at=lambda i, x: overfit(i, x))
    )
    (a,) = alerts_of(eng, "overfitting")
    assert a.severity == "warning"
    assert 400 <= a.step <= 500
    assert a.evidence["raised_at_step"] <= 700
    assert a.evidence["train_loss"] < a.evidence["train_loss_at_best"]
    assert eng.facts()["eval_loss_best_step"].value <= 449


def test_one_bad_evaluation_is_not_overfitting() -> None:
    eng = run_engine(Run(eval_every=50, eval_at=lambda i, x: x * 3 if i == 549 else x))
    assert noisy(eng) == []


def test_noisy_evaluations_are_not_overfitting() -> None:
    import random

    r = random.Random(5)
    eng = run_engine(
        Run(
            steps=3000,
            tau=1500,
            eval_every=25,
            eval_at=lambda i, x: x * math.exp(0.3 * r.gauss(0, 1)),
        )
    )
    assert alerts_of(eng, "overfitting") == []


def _two_eval_sets(kl: bool = False) -> RuleEngine:
    """Evaluations on two sets, interleaved: ``clean_loss`` keeps falling with the train
    loss, ``shifted_loss`` turns up at step 400 (or, with ``kl``, a ``loss`` that keeps
    falling beside a ``kl_loss`` part that rises by design)."""
    run = Run(steps=1500, tau=400, floor=0.05, eval_every=50, eval_at=lambda i, x: overfit(i, x))
    eng = RuleEngine()
    for rec in run.records():
        if rec.get("kind") == "eval":
            rising, step = rec.pop("loss"), rec["step"]
            falling = 0.6 * math.exp(-step / 800) + 0.1
            if kl:
                rec.update(loss=falling, kl_loss=rising)
            else:  # one record per set, as a Trainer with two eval datasets writes them
                eng.feed({**rec, "clean_loss": falling})
                rec["shifted_loss"] = rising
        eng.feed(rec)
    eng.finish()
    return eng


def test_each_evaluation_set_is_judged_on_its_own() -> None:
    (a,) = alerts_of(_two_eval_sets(), "overfitting")
    assert a.evidence["eval_set"] == "shifted_loss" and "eval shifted_loss" in a.message
    assert 400 <= a.step <= 500


def test_the_parts_of_an_eval_loss_are_not_evaluation_sets() -> None:
    assert alerts_of(_two_eval_sets(kl=True), "overfitting") == []  # kl_loss may rise


def test_an_evaluation_set_name_from_the_log_is_cut() -> None:
    from dltop.tui.core.rules.evals import MAX_SET_NAME, eval_losses  # noqa: PLC0415

    ((name, value),) = eval_losses({"kind": "eval", "x" * 100_000 + "_loss": 0.5})
    assert len(name) == MAX_SET_NAME and value == 0.5


@pytest.mark.slow
def test_the_overfitting_rules_centred_medians_are_the_slices_medians() -> None:
    """Written out for speed (an eval every step paid a sort per evaluation), they must
    be the floats ``median_of`` of each slice gives, signed zeros included."""
    import random

    from dltop.tui.core.rules.evalseries import centred_medians
    from dltop.tui.core.rules.window import median_of

    r = random.Random(3)
    pool_of = (0.0, -0.0, 1.0, 2.5, 1e-300, 1e300, -1e300, 5e-324)
    for _ in range(20000):
        n = r.randint(0, 70)
        raw = [r.choice((*pool_of, r.gauss(0, 1), r.random())) for _ in range(n)]
        want = [median_of(raw[max(0, i - 1) : i + 2]) or 0.0 for i in range(n)]
        assert list(map(repr, centred_medians(raw))) == list(map(repr, want)), raw
