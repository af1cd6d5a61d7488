"""Loss spikes, exploding gradients, divergence: on the step, relative to the run's own history."""

from __future__ import annotations

import pytest
from rulekit import Run, alerts_of, lr_step, noisy, run_engine


def test_loss_spike_flagged_on_its_step_with_ratio_evidence() -> None:
    """A warning on its very step; once the losses after it show the run absorbed it,
    information (the severity policy: an absorbed spike needs no action)."""
    run = Run(loss_at=lambda i, x: x * 40 if i == 500 else x)
    records = list(run.records())
    at = next(i for i, r in enumerate(records) if r.get("step") == 500 and r["kind"] == "step")
    from dltop.tui.core.rules import RuleEngine

    live = RuleEngine()
    live.feed_many(records[: at + 1])
    (a,) = alerts_of(live, "loss_spike")
    assert (a.step, a.severity) == (500, "warning")
    assert a.evidence["ratio"] >= 10 and a.evidence["window"] == 100
    assert "x the median of the last 100 steps" in a.message
    eng = run_engine(run)
    (a,) = alerts_of(eng, "loss_spike")
    assert (a.step, a.severity, a.title) == (500, "info", "Loss spike (absorbed)")
    assert "the loss did not react" in a.message
    assert a.active is False  # it passed


def test_a_spike_the_loss_does_not_recover_from_stays_a_warning() -> None:
    eng = run_engine(Run(loss_at=lambda i, x: x * 40 if i == 500 else (x * 3 if i > 500 else x)))
    (a,) = alerts_of(eng, "loss_spike")
    assert (a.step, a.severity) == (500, "warning")


def test_a_lone_grad_spike_the_loss_ignores_is_information_at_any_step() -> None:
    """A stable, clipped 1e5-2e6 grad norm with one 30x spike that the loss ignores:
    information whether it comes before step 100 (the baseline still filling) or after."""
    for at in (80, 400):
        run = Run(
            gn0=4e5,
            gn_noise=0.4,
            gn_at=lambda i, g, at=at: g * 30 if i == at else g,  # type: ignore[misc]
        )
        (a,) = alerts_of(run_engine(run), "grad_explosion")
        assert (a.step, a.severity) == (at, "info"), a.message
        assert "(absorbed)" in a.title


def test_loss_spike_ignored_during_warmup() -> None:
    eng = run_engine(Run(loss_at=lambda i, x: x * 40 if i == 20 else x))
    assert alerts_of(eng, "loss_spike") == []


def test_small_bump_is_not_a_spike() -> None:
    eng = run_engine(Run(loss_at=lambda i, x: x * 4 if i == 500 else x))
    assert noisy(eng) == []


def test_grad_explosion_single_step_is_a_warning_sustained_is_critical() -> None:
    """Severity policy (docs/alerts.md): one step at 60x is a spike worth a look, not a run
    wasting its compute; two of five steps over the critical line is an explosion."""
    from dltop.tui.core.rules import Config, RuleEngine

    records = list(Run(gn_at=lambda i, g: g * 60 if i == 600 else g).records())
    cut = next(i for i, r in enumerate(records) if r["kind"] == "step" and r["step"] == 601)
    eng = RuleEngine(Config.load())
    eng.feed_many(records[:cut])
    (a,) = alerts_of(eng, "grad_explosion")
    assert (a.step, a.severity, a.title) == (600, "warning", "Gradient norm spike")
    assert a.evidence["ratio"] >= 10
    assert a.evidence["raised_at_step"] == 600
    eng.feed_many(records[cut:])  # the loss never reacted: context, not a problem
    (a,) = alerts_of(eng, "grad_explosion")
    assert (a.severity, a.title) == ("info", "Gradient norm spike (absorbed)")
    hurt = run_engine(
        Run(
            gn_at=lambda i, g: g * 60 if i == 600 else g,
            loss_at=lambda i, x: x * 3 if 600 < i < 640 else x,
        )
    )
    (b,) = alerts_of(hurt, "grad_explosion")
    assert b.severity == "warning", "the loss reacted: still worth a look"
    eng = run_engine(Run(gn_at=lambda i, g: g * 60 if i in (600, 602) else g))
    (a,) = alerts_of(eng, "grad_explosion")
    assert (a.step, a.severity, a.title) == (600, "critical", "Exploding gradients")
    assert "2 of the last 5 steps" in a.message


def test_a_lone_spike_while_the_baseline_fills_can_be_absorbed_too() -> None:
    """One grad norm at 12x in the first 100 steps (heavy-tailed norms do that) that the
    loss never reacts to is context, as the same spike later is; two such steps, or a
    loss that reacts, stay a warning."""
    lone = run_engine(Run(gn_at=lambda i, g: g * 12 if i == 60 else g, gn_noise=0.1))
    (a,) = alerts_of(lone, "grad_explosion")
    assert (a.step, a.severity, a.title) == (60, "info", "Gradient norm spike (absorbed)")
    assert "still filling" in a.message
    hurt = run_engine(
        Run(
            gn_at=lambda i, g: g * 12 if i == 60 else g,
            gn_noise=0.1,
            loss_at=lambda i, x: x * 3 if 60 < i < 100 else x,
        )
    )
    assert [a.severity for a in alerts_of(hurt, "grad_explosion")] == ["warning"]


def test_a_burst_while_the_baseline_fills_is_judged_by_the_loss() -> None:
    """Grad norms at 7x on 3 of 5 steps before 100 have been seen (an LSTM's norms grow
    into their working range like this) and a loss that never reacts: context. The
    same burst with a loss that triples stays a warning, and after 100 steps a burst is
    a warning whatever the loss does."""
    burst = Run(gn_at=lambda i, g: g * 7 if 70 <= i < 73 else g, gn_noise=0.1)
    (a,) = alerts_of(run_engine(burst), "grad_explosion")
    assert (a.step, a.severity) == (72, "info") and a.title.endswith("(absorbed)")
    assert "did not react" in a.message
    hurt = Run(
        gn_at=lambda i, g: g * 7 if 70 <= i < 73 else g,
        gn_noise=0.1,
        loss_at=lambda i, x: x * 3 if 72 < i < 110 else x,
    )
    assert [a.severity for a in alerts_of(run_engine(hurt), "grad_explosion")] == ["warning"]
    late = Run(gn_at=lambda i, g: g * 7 if 600 <= i < 603 else g, gn_noise=0.1)
    assert [a.severity for a in alerts_of(run_engine(late), "grad_explosion")] == ["warning"]


def test_sustained_moderate_explosion_is_a_warning_three_of_five() -> None:
    eng = run_engine(Run(gn_at=lambda i, g: 7.0 if 600 <= i < 603 else g, gn_noise=0.1))
    (a,) = alerts_of(eng, "grad_explosion")
    assert (a.step, a.severity) == (602, "warning")
    assert "3 of the last 5 steps" in a.message


def test_grad_explosion_right_after_an_lr_jump_is_forgiven() -> None:
    # a schedule that triples lr at step 400 may double the grad norm for a while
    eng = run_engine(
        Run(
            lr=lr_step(0.01, every=400, gamma=3.0),
            gn_at=lambda i, g: g * 8 if 400 <= i < 410 else g,
        )
    )
    assert alerts_of(eng, "grad_explosion") == []


def test_divergence_when_the_loss_climbs_and_stays() -> None:
    def climb(i: int, x: float) -> float:
        return x * 1.04 ** (i - 400) if i >= 400 else x

    eng = run_engine(Run(loss_at=climb))
    (a,) = alerts_of(eng, "divergence")
    assert 400 <= a.step <= 450
    assert a.evidence["raised_at_step"] - 400 <= 50
    assert a.severity == "critical" and a.evidence["ratio"] >= 5
    assert a.evidence["min_step"] <= 420


def test_divergence_from_the_first_step() -> None:
    eng = run_engine(Run(steps=200, loss_at=lambda i, x: 2.3 * 1.1**i))
    (a,) = alerts_of(eng, "divergence")
    assert a.step <= 30 and a.severity == "critical"


def test_loss_wobble_near_zero_is_not_divergence() -> None:
    # converged to 1e-4; it triples but gives back none of the progress made
    eng = run_engine(Run(floor=1e-4, tau=50, loss_at=lambda i, x: x * 3 if i >= 600 else x))
    assert alerts_of(eng, "divergence") == []


def test_a_jump_to_a_new_maximum_lr_does_not_hide_a_critical_explosion() -> None:
    # the lr_jump fault: a StepLR typo multiplies lr by 50 at step 400; the grad norm
    # blows up on the next step. The grace after a schedule jump must not swallow it.
    eng = run_engine(
        Run(lr=lambda i: 0.01 if i < 400 else 0.5, gn_at=lambda i, g: g * 40 if i >= 401 else g)
    )
    (a,) = alerts_of(eng, "grad_explosion")
    assert (a.step, a.severity) == (401, "critical")


def test_a_restart_to_an_earlier_lr_still_forgives_a_burst() -> None:
    # cosine-with-restarts style: back to the lr the run already trained at; a burst of
    # large gradients while the optimiser settles is normal
    def lr(i: int) -> float:
        return 0.01 if 300 <= i < 600 else 0.1

    eng = run_engine(Run(lr=lr, gn_at=lambda i, g: g * 40 if 601 <= i < 606 else g))
    assert alerts_of(eng, "grad_explosion") == []


def test_warmup_ramp_to_its_peak_stays_quiet() -> None:
    from rulekit import lr_warmup_cosine

    eng = run_engine(Run(lr=lr_warmup_cosine(0.1, warmup=100, total=1000)))
    assert noisy(eng) == []


def test_a_short_grad_window_still_reaches_a_critical_baseline() -> None:
    # window 50 < critical_after 100: before, the baseline could never count as settled
    eng = run_engine(
        Run(gn_at=lambda i, g: g * 60 if i in (600, 601) else g), {"grad_explosion.window": 50}
    )
    (a,) = alerts_of(eng, "grad_explosion")
    assert (a.step, a.severity, a.evidence["window"]) == (600, "critical", 50)


def test_windows_below_min_samples_do_not_switch_the_rules_off() -> None:
    spike = run_engine(
        Run(loss_at=lambda i, x: x * 40 if i == 500 else x), {"loss_spike.window": 20}
    )
    (a,) = alerts_of(spike, "loss_spike")
    assert a.step == 500 and a.evidence["window"] == 20
    boom = run_engine(
        Run(gn_at=lambda i, g: g * 60 if i in (600, 601) else g), {"grad_explosion.window": 20}
    )
    (b,) = alerts_of(boom, "grad_explosion")
    assert (b.step, b.severity) == (600, "critical")


def test_lr_checklist_step_reads_the_lr_at_the_alert_not_at_the_end() -> None:
    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for

    # lr 0.1 when the gradients explode at step 600, decayed to 1e-4 by the end of the log
    eng = run_engine(
        Run(lr=lr_step(0.1, every=700, gamma=0.001), gn_at=lambda i, g: g * 60 if i == 600 else g)
    )
    (a,) = alerts_of(eng, "grad_explosion")
    assert eng.facts()["lr_last"].value < 1e-3
    marks = {c.step.id: c for c in evaluate(checklist_for(a), eng.facts(), a)}
    assert marks["lr_high"].mark == "yes" and marks["lr_high"].evidence == "lr = 0.1 at step 600"


def test_divergence_checklist_judges_the_rise_at_the_alert_not_the_last_finite_losses() -> None:
    """A run that diverges and ends in NaN: the last *finite* losses may be low again, but
    the rise the alert measured is what the first step must answer."""
    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for

    def blow_up(i: int, x: float) -> float:
        if i >= 700:
            return float("nan")
        return x * 1.05 ** (i - 600) if i >= 600 else x

    eng = run_engine(Run(steps=800, loss_at=blow_up))
    (a,) = [x for x in alerts_of(eng, "divergence") if x.severity == "critical"]
    marks = {c.step.id: c for c in evaluate(checklist_for(a), eng.facts(), a)}
    assert marks["loss_rise"].mark == "yes", marks["loss_rise"]
    assert marks["loss_rise"].evidence.startswith("ratio = ") and "×" in marks["loss_rise"].evidence


@pytest.mark.parametrize("seed", [1, 3, 5])
@pytest.mark.parametrize("noise", [1.0, 1.5])
def test_a_noisy_healthy_run_is_not_divergence(seed: int, noise: float) -> None:
    """Per-step loss swinging over two decades around ~0.12 (small batches, an RNN): the
    lowest point of the smoothed loss is a noise dip, and comparing later noise peaks with
    it once gave a critical divergence (seed 1 at noise 1.0: 6x 'its minimum')."""
    run = Run(steps=3000, seed=seed, loss0=0.6, floor=0.12, tau=400, noise=noise)
    eng = run_engine(run)
    assert alerts_of(eng, "divergence") == []
