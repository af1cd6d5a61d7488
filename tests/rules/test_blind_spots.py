"""Blind spots real runs showed: a blow-up in the first steps, a dead network, a noisy
healthy run called divergence (see also tests/rules/test_rules_spikes.py).

One real tiny training (Adam at lr 1 kills every ReLU of an MLP in its first updates,
then the loss sits at chance) and synthetic streams for the exact shapes.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkkit import check_run
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.figures import start_level
from rulekit import Run, alerts_of, run_engine

DEAD_NET = """
import sys, torch
from torch import nn
from dltop.probe import Probe
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                      nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.Adam(model.parameters(), lr=float(sys.argv[2]))
X, Y = torch.randn(2048, 20), torch.randint(0, 10, (2048,))
with Probe(path=sys.argv[1], model=model, optimizer=opt, socket=False, system=False,
           layers_every=10) as probe:
    for i in range(250):
        idx = torch.randint(0, 2048, (64,))
        loss = nn.functional.cross_entropy(model(X[idx]), Y[idx])
        opt.zero_grad(); loss.backward(); opt.step()
        probe.step(loss=loss)
"""


@pytest.mark.slow
def test_adam_at_a_too_high_lr_kills_every_relu(tmp_path: Path) -> None:
    """The blow-up is named on its step, the dead network is critical in its own words,
    and the plateau is measured from before the blow-up (not "97 % better")."""
    log = tmp_path / "dead.jsonl"
    subprocess.run([sys.executable, "-c", DEAD_NET, str(log), "1.0"], check=True, timeout=300)
    out = check_run(log)
    by_id = {a["id"]: a for a in out["alerts"]}
    early = by_id["divergence"]
    assert early["severity"] == "critical" and early["step"] <= 3
    assert early["evidence"]["raised_at_step"] <= early["step"] + 3
    dead = by_id["dead_units"]
    assert dead["severity"] == "critical" and dead["title"] == "Dead network"
    assert "exactly zero" in dead["message"] and "no gradient" not in dead["message"]
    progress = {s["id"]: s for s in dead["checklist"]}["progress"]
    assert progress["mark"] == "yes", progress  # measured from before the blow-up


@pytest.mark.slow
def test_the_same_network_at_a_sane_lr_is_quiet(tmp_path: Path) -> None:
    log = tmp_path / "ok.jsonl"
    subprocess.run([sys.executable, "-c", DEAD_NET, str(log), "1e-3"], check=True, timeout=300)
    out = check_run(log)
    loud = [(a["id"], a["severity"]) for a in out["alerts"] if a["severity"] != "info"]
    assert loud == [], loud


def test_a_blow_up_in_the_first_three_steps_is_named_on_its_step() -> None:
    """minGPT's Trainer at lr 0.5: 2.31 -> 6.1 -> 34.4, then high for a while."""
    seq = [2.31, 6.1, 34.4, 30.0, 25.0, 20.0]

    def blow(i: int, x: float) -> float:
        return seq[i] if i < len(seq) else 4.0

    eng = run_engine(Run(steps=300, loss_at=blow))
    (a,) = alerts_of(eng, "divergence")
    assert a.severity == "critical" and a.step == 2
    # named on its step, raised within 3 steps of it (three highs in a row while the
    # start's noise is unknown)
    assert a.evidence["raised_at_step"] <= a.step + 3


def test_a_noisy_start_is_no_blow_up() -> None:
    for seed in range(8):
        eng = run_engine(Run(steps=200, seed=seed, loss0=0.5, floor=0.3, noise=1.0))
        assert alerts_of(eng, "divergence") == [], seed


def test_the_start_level_leaves_out_a_blow_up() -> None:
    assert start_level([2.3, 2.2, 2.4, 2.1]) == 2.25
    assert start_level([2.3, 5197.0, 3087.0, 40.0, 2.3, 2.3]) == 2.3
    assert start_level([]) is None


def test_zero_gradients_are_called_dead_not_missing() -> None:
    """Every hidden layer with an exactly-zero gradient: critical, whatever the gate."""

    def dead(i: int, rec: dict) -> dict:
        n = len(rec["names"])
        rec["grad_norm"] = [0.0] * (n - 1) + [0.3]
        rec["zero_frac"] = [1.0] * (n - 1) + [0.0]
        return rec

    eng = run_engine(Run(steps=400, layers_every=20, layers_at=dead))
    (a,) = alerts_of(eng, "dead_units")
    assert a.severity == "critical" and "exactly zero" in a.message
    assert "no gradient" not in a.message


def test_a_global_grad_norm_of_exactly_zero_is_no_gradient_at_all() -> None:
    """A loss detached from the graph (or exactly 0): nothing learns. A few zeros among
    normal norms (some trainers log 0 on skipped steps) are not that."""
    eng = run_engine(Run(steps=400, gn_at=lambda i, g: 0.0 if i >= 200 else g))
    (a,) = alerts_of(eng, "dead_units")
    assert (a.severity, a.title, a.step) == ("critical", "No gradient at all", 200)
    assert a.evidence["raised_at_step"] - 200 <= 60
    few = run_engine(Run(steps=400, gn_at=lambda i, g: 0.0 if i % 40 < 7 else g))
    assert alerts_of(few, "dead_units") == []


def _evals_run(evals: list[float]) -> RuleEngine:
    recs: list[dict] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    for i in range(1, 200 * len(evals) + 1):
        recs.append({"kind": "step", "step": i, "loss": 0.6 * 0.998**i})
        if i % 200 == 0:
            recs.append({"kind": "eval", "step": i, "loss": evals[i // 200 - 1]})
    eng = RuleEngine(Config.load())
    eng.feed_many(recs)
    eng.finish()
    return eng


def test_overfitting_after_a_lucky_low_evaluation() -> None:
    """Eval 0.142, 0.111, 0.114, then 0.142, 0.150, 0.150 while the train loss falls (a
    real RoBERTa fine-tune): the best level is where the evaluations were best (the
    median of the best and its neighbours, 0.114 at step 600), not two evaluations later.
    A jump then a level over three evaluations is a step up that holds: every one of them
    10 % and three noise sigmas above the best, a warning without waiting for a trend
    (the line through four points needs t 4.3). Two more that keep rising keep it."""
    (a,) = alerts_of(_evals_run([0.142, 0.111, 0.114, 0.142, 0.150, 0.150]), "overfitting")
    assert a.severity == "warning" and a.evidence["best_step"] == 600 and a.step == 600
    more = _evals_run([0.142, 0.111, 0.114, 0.142, 0.150, 0.150, 0.156, 0.161])
    (a,) = alerts_of(more, "overfitting")
    assert a.severity == "warning" and a.evidence["best_step"] == 600


def test_the_same_checkpoint_evaluated_twice_is_one_evaluation() -> None:
    """A Trainer's final evaluate() repeats the last in-loop evaluation at the same step:
    one evaluation, not a second point that turns a level into a trend."""
    eng = _evals_run([0.142, 0.111, 0.114, 0.142, 0.150])
    eng.feed({"kind": "eval", "step": 1000, "loss": 0.150})
    eng.finish()
    assert len(eng.overfitting_rule.evals) == 5
    assert [a.severity for a in alerts_of(eng, "overfitting")] == ["info"]


def _overfitting_warned(seeds: int, eval_sigma: float, **run: Any) -> list[int]:
    """The seeds of ``Run(**run)`` whose log-normal evaluation noise (``eval_sigma``)
    brings an overfitting warning or worse."""
    warned = []
    for seed in range(seeds):
        r = random.Random(seed)
        noisy_evals = Run(
            seed=seed, eval_at=lambda i, x, r=r: x * math.exp(eval_sigma * r.gauss(0, 1)), **run
        )
        if any(a.severity != "info" for a in alerts_of(run_engine(noisy_evals), "overfitting")):
            warned.append(seed)
    return warned


@pytest.mark.slow
def test_noisy_evaluations_of_an_improving_run_rarely_warn() -> None:
    """A run still improving, evaluated every 25 steps with 30 % log-normal eval noise,
    on 20 seeds: the best evaluation is a lucky low, and a line fitted from it rises by
    regression to the mean alone. With the luck of the best in the margin and the t
    the line's number of points needs, at most one seed of 20 warns (five did with
    neither, five with the t alone, two with the luck alone)."""
    warned = _overfitting_warned(20, eval_sigma=0.3, steps=3000, tau=1500, eval_every=25)
    assert len(warned) <= 1, warned


def test_a_plateau_that_learned_since_is_information_again() -> None:
    """Stuck at the start for a while (a warning), then the run learns and flattens: the
    verdict now is a plateau after learning (info), not 'not learning'."""

    def stuck_then_learn(i: int, x: float) -> float:
        return 2.3 if i < 400 else 0.2 + 2.1 * 2.718 ** (-(i - 400) / 100)

    eng = run_engine(Run(steps=2000, loss_at=stuck_then_learn, noise=0.02))
    plateaus = alerts_of(eng, "plateau")
    assert plateaus and plateaus[-1].severity == "info"


def test_a_gap_in_a_log_without_heartbeats_is_information() -> None:
    """Another tool's log carries no heartbeat: a gap between two records may be an
    evaluation, a checkpoint or a resume as well as a hang."""
    from dltop.tui.core.rules import Config, RuleEngine

    recs = [
        r
        for r in Run(steps=600, pause_at={300: 900.0}).records()
        if r["kind"] not in ("heartbeat", "sys")
    ]
    eng = RuleEngine(Config.load())
    eng.feed_many(recs)
    eng.finish()
    (a,) = alerts_of(eng, "stall")
    assert (a.severity, a.title) == ("info", "Gap between steps")
    assert "no heartbeats" in a.message


def test_the_early_watch_closes_when_the_step_never_advances() -> None:
    """A log whose step number stays the same (a user logging step=0 every time): the watch
    is bounded in records too, so its list of losses cannot grow with the file."""
    from dltop.tui.core.rules import Config, RuleEngine

    eng = RuleEngine(Config.load())
    eng.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    for i in range(500):
        eng.feed({"kind": "step", "step": 0, "t": float(i), "loss": 1.0 + 0.01 * (i % 7)})
    rule = eng.divergence_rule
    assert not rule.early_open and len(rule.watch.logs) <= rule.early_steps


def test_a_rank_block_keeps_a_bounded_sample() -> None:
    from dltop.tui.core.ranks.compare import BUCKET_RECORDS, RankTimes

    times = RankTimes()
    times.feed({"kind": "step", "step": 3, "step_time": 0.1} for _ in range(10 * BUCKET_RECORDS))
    times.finish()
    assert times.step == {0: 0.1} and len(times._s) == 0


def test_a_converged_run_with_noisy_evaluations_does_not_warn() -> None:
    """Converged (the train loss within 3 % of its floor for the last two thirds), evaluated
    every 50 steps with 10 % noise, on 12 seeds: the best evaluation is the luckiest of
    ~30 draws, about sqrt(2 ln n) sigmas below the level, and a rise must clear that too.
    Without it, seeds 7 and 9 warned."""
    warned = _overfitting_warned(12, eval_sigma=0.1, steps=1500, tau=150, noise=0.05, eval_every=50)
    assert warned == []


def test_evaluations_at_one_step_with_training_between_are_kept() -> None:
    """A log whose evaluations all carry the same step field while training goes on (an
    epoch counter written as the step) keeps each evaluation: only an evaluation with no
    training step since the last one is the same checkpoint again."""
    from dltop.tui.core.rules import Config, RuleEngine

    eng = RuleEngine(Config.load())
    eng.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    for i in range(1, 601):
        eng.feed({"kind": "step", "step": i, "loss": 1.0})
        if i % 100 == 0:
            eng.feed({"kind": "eval", "step": 7, "loss": 1.0 + i / 1000})
    assert len(eng.overfitting_rule.evals) == 6
