"""Baselines against the noise, from the real runs dltop missed: a short run's plateau
needs a rank test across its thirds (Jonckheere-Terpstra) to show a fall, not just one of
many noisy stretches 1 % below the first by luck; overfitting's early stage measures the
eval noise with third differences too, which the bend of a levelling descent does not
inflate. Also: a warm-up from lr 0 that has decayed since is no longer a warm-up, and a
Trainer checkpoint saved at ``max_steps`` is a finished run."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.alerts import Alert
from dltop.tui.core.rules.window import falling_z
from foreignkit import REALRUNS, check_json


def _engine(records: list[dict[str, Any]]) -> RuleEngine:
    eng = RuleEngine(Config.load())
    eng.feed_many(records)
    eng.finish()
    return eng


def _plateaus(eng: RuleEngine) -> list[Alert]:
    return [a for a in eng.alerts() if a.id == "plateau"]


def _run(
    curve: list[float], every: int, end: str | None, lr: list[float] | None = None
) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    for i, x in enumerate(curve):
        step = every * (i + 1)
        lr_i = lr[i] if lr is not None else 1e-4
        recs.append({"kind": "step", "step": step, "t": float(step), "loss": x, "lr": lr_i})
    if end is not None:
        recs.append({"kind": "event", "type": "exit", "status": end, "step": every * len(curve)})
    return recs


def _noisy(level: float, n: int, spread: float, seed: int, fall: float = 0.0) -> list[float]:
    """``n`` losses around ``level`` (uniform ±spread), falling by ``fall`` over the run."""
    r = random.Random(seed)
    return [level * (1 - fall * i / n) * (1 + spread * (2 * r.random() - 1)) for i in range(n)]


# ------------------------------------------------------------------ the rank test itself


def test_the_rank_test_reads_noise_as_noise_and_a_fall_as_a_fall() -> None:
    r = random.Random(7)
    null = [
        falling_z([sorted(r.gauss(0, 1) for _ in range(5)) for _ in range(5)]) for _ in range(2000)
    ]
    assert abs(statistics.mean(null)) < 0.1 and 0.9 < statistics.pstdev(null) < 1.1
    assert sum(z >= 2 for z in null) / len(null) < 0.04  # one-sided 2 sigma: ~2.3 %
    fall = [[10.0 - 5 * w - i for i in range(5)] for w in range(5)]  # 5 windows of 5, no overlap
    assert falling_z([sorted(g) for g in fall]) > 5
    rise = [sorted(g) for g in reversed(fall)]
    assert falling_z(rise) < -5


def test_the_rank_test_is_scale_free_and_one_wild_loss_moves_it_by_one_rank() -> None:
    r = random.Random(1)
    groups = [sorted(1 - 0.05 * w + r.gauss(0, 0.1) for _ in range(8)) for w in range(4)]
    z = falling_z(groups)
    assert falling_z([[1000 * x for x in g] for g in groups]) == pytest.approx(z)
    wild = [g[:] for g in groups]
    wild[3][-1] = 1e12  # one huge loss in the last window
    assert abs(falling_z(wild) - z) < 0.5
    assert falling_z([[], [1.0]]) == 0.0 and falling_z([[1.0]]) == 0.0


# ------------------------------------------------------------------ a whole short run


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_short_run_that_never_learned_is_not_learning_at_its_end(seed: int) -> None:
    """60 logged losses (a 60-step LoRA smoke run) at 0.85 ± 30 %: some third of them has a
    median 1 % below the first third's by luck; the thirds' ranks show no fall."""
    eng = _engine(_run(_noisy(0.85, 60, 0.3, seed), every=1, end="ok"))
    (a,) = _plateaus(eng)
    assert a.severity == "warning" and a.evidence["whole_run"] is True
    assert a.evidence["rank_z"] < 2


def test_a_noisy_short_run_that_learned_is_quiet() -> None:
    for seed in range(5):
        eng = _engine(_run(_noisy(0.85, 60, 0.3, seed, fall=0.4), every=1, end="ok"))
        assert _plateaus(eng) == [], seed


def test_a_warm_up_from_lr_0_that_decayed_since_is_judged() -> None:
    """The Trainer's default schedule: lr 0 at the first step, up, then down to the end.
    The lr at the end is not its peak: past the warm-up, so the run is judged."""
    flat = [1.39 + 0.004 * math.sin(i) for i in range(12)]
    lr = [min(i, 12 - i) * 1e-5 for i in range(12)]
    (a,) = _plateaus(_engine(_run(flat, every=100, end="ok", lr=lr)))
    assert a.severity == "warning" and a.evidence["whole_run"] is True
    rising = [i * 1e-5 for i in range(12)]  # still rising at the end: a warm-up, not judged
    assert _plateaus(_engine(_run(flat, every=100, end="ok", lr=rising))) == []


# ------------------------------------------------------------------ a Trainer checkpoint


def _state(path: Path, history: list[dict[str, Any]], **state: Any) -> Path:
    path.write_text(json.dumps({"log_history": history, **state}))
    return path


HISTORY = [{"step": 10 * (i + 1), "loss": 1.0 - 0.01 * i, "learning_rate": 1e-4} for i in range(20)]


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ({"global_step": 200, "max_steps": 200}, "finished"),
        ({"global_step": 120, "max_steps": 200, "stateful_callbacks": {"TrainerControl": {"args": {"should_training_stop": True}}}}, "finished"),
        ({"global_step": 120, "max_steps": 200}, "unknown"),
        ({"global_step": 200, "max_steps": True}, "unknown"),
        ({"global_step": "200", "max_steps": "200"}, "unknown"),
        ({"global_step": 200, "max_steps": -1}, "unknown"),
        ({"global_step": 200, "max_steps": 200, "stateful_callbacks": ["x"]}, "finished"),
        ({"global_step": 120, "max_steps": 200, "stateful_callbacks": {"TrainerControl": {"args": {"should_training_stop": "yes"}}}}, "unknown"),
    ],
)  # fmt: skip
def test_a_checkpoint_saved_at_its_last_step_is_a_finished_run(
    tmp_path: Path, capsys: Any, state: dict[str, Any], status: str
) -> None:
    """The summary entry is written after the last checkpoint: a run read from its last
    checkpoint's trainer_state.json reached max_steps (or was told to stop) all the same."""
    _, out = check_json(capsys, _state(tmp_path / "trainer_state.json", HISTORY, **state))
    assert out["status"] == status, out


# ------------------------------------------------------------------ the public runs


def test_the_public_noisy_smoke_run_is_not_learning(capsys: Any) -> None:
    """A 60-step LoRA run read from its last checkpoint (no summary entry): finished, and
    its noisy losses show no fall."""
    path = REALRUNS / "hf/Artaccann__OSOL_backend__outputs.json"
    if not path.is_file():
        pytest.skip(f"no {path} (the shared real-runs folder is not checked out)")
    _, out = check_json(capsys, path)
    assert out["status"] == "finished"
    (a,) = [a for a in out["alerts"] if a["id"] == "plateau"]
    assert a["severity"] == "warning" and a["evidence"]["whole_run"] is True


# ------------------------------------------------------------------ overfitting's early stage


JAONG = [0.6598, 0.5546, 0.5185, 0.4940, 0.4894, 0.4853, 0.4873, 0.4906, 0.4907, 0.4917]


def test_a_descent_that_levels_off_then_rises_is_past_its_best() -> None:
    """Ten evaluations once an epoch: a descent that bends flat, then four smooth rises of
    1.3 % in all while train keeps falling. Second differences read the bend as noise
    (about 0.0037 here, a margin past the rise); third differences do not."""
    train = [1.14 * 0.87**i for i in range(10)]
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    for i, (ev, tr) in enumerate(zip(JAONG, train, strict=True)):
        step = 549 * (i + 1)
        recs.append({"kind": "step", "step": step, "t": float(step), "loss": tr})
        recs.append({"kind": "eval", "step": step, "t": step + 0.5, "loss": ev})
    (a,) = [a for a in _engine(recs).alerts() if a.id == "overfitting"]
    assert a.severity == "info" and a.evidence["best_step"] == 549 * 6
    assert a.evidence["eval_noise"] < 0.002


def test_five_evaluations_keep_the_second_difference_noise() -> None:
    """Third differences need 6 evaluations: with 5, "unknown" (0) must not win the
    smaller-of-two and leave the tolerance alone as the margin."""
    evals = [0.176, 0.166, 0.157, 0.215, 0.195]  # a noisy held-out set, not a clear rise
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    for i, ev in enumerate(evals):
        step = 100 * (i + 1)
        recs.append({"kind": "step", "step": step, "t": float(step), "loss": 0.5 * 0.5**i})
        recs.append({"kind": "eval", "step": step, "t": step + 0.5, "loss": ev})
    assert [a for a in _engine(recs).alerts() if a.id == "overfitting"] == []


def test_the_noise_of_pure_noise_reads_the_same_either_way() -> None:
    from dltop.tui.core.rules.evalseries import diff_noise

    r = random.Random(2)
    twos, threes = [], []
    for _ in range(300):
        xs = [r.gauss(0, 1) for _ in range(40)]
        twos.append(diff_noise(xs))
        threes.append(diff_noise(xs, order=3))
    assert 0.9 < statistics.mean(twos) < 1.1 and 0.9 < statistics.mean(threes) < 1.1
    bend = [0.5 + 0.5 * math.exp(-i / 2) for i in range(10)]  # no noise at all, a bend
    assert diff_noise(bend, order=3) < diff_noise(bend) / 2
    assert diff_noise([1.0, 2.0, 3.0, 4.0, 5.0], order=3) == 0.0  # too few: unknown


def test_the_public_run_past_its_best_is_named(capsys: Any) -> None:
    path = REALRUNS / "hf/Jaong__Checkpoint-of-CPT__root.json"
    if not path.is_file():
        pytest.skip(f"no {path} (the shared real-runs folder is not checked out)")
    _, out = check_json(capsys, path)
    assert [a["severity"] for a in out["alerts"] if a["id"] == "overfitting"] == ["info"], out
