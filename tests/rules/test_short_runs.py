"""Runs logged a few times (a fine-tune evaluated once an epoch, a dozen logged losses):
the early overfitting stage, the whole-run plateau verdict at a clean exit, and an eval
loss that falls while no task metric moves. Synthetic streams for the exact shapes, then
the public runs in shared/realruns that each rule was written for (skipped without it)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.alerts import Alert
from dltop.tui.core.rules.metric_mismatch import direction
from foreignkit import REALRUNS, check_json


def _engine(records: list[dict[str, Any]]) -> RuleEngine:
    eng = RuleEngine(Config.load())
    eng.feed_many(records)
    eng.finish()
    return eng


def _of(eng: RuleEngine, alert_id: str) -> list[Alert]:
    return [a for a in eng.alerts() if a.id == alert_id]


def _epochs(evals: list[float], train: list[float], per_epoch: int = 100) -> list[dict[str, Any]]:
    """A run logged every 10 steps, evaluated at the end of each epoch."""
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    r = random.Random(3)
    step = 0
    for ev, tr in zip(evals, train, strict=True):
        for _ in range(per_epoch // 10):
            step += 10
            loss = tr * (1 + 0.02 * (2 * r.random() - 1))
            recs.append({"kind": "step", "step": step, "t": float(step), "loss": loss})
        recs.append({"kind": "eval", "step": step, "t": step + 0.5, "loss": ev})
    return recs


# ------------------------------------------------------------------ overfitting, early stage


def test_two_evaluations_above_the_best_are_information_naming_the_best_step() -> None:
    """Three evaluations in all (once an epoch): too few for the warning, enough to say the
    run is past its best and which checkpoint to keep."""
    eng = _engine(_epochs([0.2626, 0.268, 0.2986], [0.39, 0.28, 0.19]))
    (a,) = _of(eng, "overfitting")
    assert a.severity == "info" and a.title == "Eval loss past its best"
    assert a.evidence["best_step"] == 100 and a.evidence["evals_since_best"] == 2
    assert a.step == 200 and "step 100 checkpoint is the best so far" in a.message


def test_a_new_best_withdraws_the_early_stage() -> None:
    """Noise above the best for two evaluations, then a new best: it was not past its best."""
    eng = _engine(_epochs([0.5, 0.4, 0.43, 0.44, 0.35], [0.6, 0.5, 0.45, 0.4, 0.35]))
    assert _of(eng, "overfitting") == []


def test_the_early_stage_needs_the_train_loss_to_fall_and_a_rise_past_tolerance() -> None:
    flat_train = _engine(_epochs([0.30, 0.33, 0.34], [0.3, 0.3, 0.3]))
    assert _of(flat_train, "overfitting") == []
    within_tolerance = _engine(_epochs([0.300, 0.302, 0.301], [0.4, 0.3, 0.2]))
    assert _of(within_tolerance, "overfitting") == []


def test_a_sustained_rise_becomes_the_warning_with_the_same_first_step() -> None:
    """Information after two evaluations above the best, the warning once the rise holds
    three with a trend: one alert, whose first step is the first evaluation past the best."""
    evals = [1.0, 0.9, 0.8, 0.7, 0.72, 0.74, 0.76, 0.78]
    seen = []
    for n in (6, 8):
        eng = _engine(_epochs(evals[:n], [1.0 - 0.08 * i for i in range(n)]))
        (a,) = _of(eng, "overfitting")
        seen.append((a.severity, a.step, a.title, a.evidence.get("stage")))
    assert seen == [
        ("info", 500, "Eval loss past its best", "early"),
        ("warning", 500, "Overfitting", None),
    ]


# ------------------------------------------------------------------ plateau over a whole short run


def _short(losses: list[float], end: str | None = "ok", **extra: Any) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    for i, x in enumerate(losses):
        step = 100 * (i + 1)
        recs.append({"kind": "step", "step": step, "t": float(step), "loss": x, "lr": 1e-4})
    if end is not None:
        recs.append({"kind": "event", "type": "exit", "status": end, "step": step, **extra})
    return recs


AT_CHANCE = [1.398, 1.39, 1.392, 1.387, 1.395, 1.389, 1.391, 1.386, 1.394, 1.388, 1.39, 1.395]


def test_a_short_run_that_never_learned_is_not_learning_at_its_clean_end() -> None:
    """12 logged losses at ln 4 (chance for four classes): too few for plateau windows."""
    (a,) = _of(_engine(_short(AT_CHANCE)), "plateau")
    assert a.severity == "warning" and a.title == "Loss plateau (not learning)"
    assert a.evidence["whole_run"] is True and a.evidence["losses"] == 12
    assert a.step == 100 and "ended without learning" in a.message


def test_a_short_run_still_in_its_lr_warm_up_is_not_called_stuck() -> None:
    """As the windowed verdict: while lr still rises the loss may wait for it."""
    recs = _short(AT_CHANCE)
    for i, r in enumerate(recs[1:-1]):
        r["lr"] = 1e-5 * (i + 1)  # a linear warm-up over the whole run
    assert _of(_engine(recs), "plateau") == []


def test_a_run_long_enough_for_windows_is_judged_on_its_last_three_quarters() -> None:
    """240 steps: the windows compared it (a 3 % dip in the second window is progress to
    them), so it is not judged in thirds of the whole run; but its last three quarters,
    back at 1.0, brought nothing: not learning, said when it ends."""
    losses = [0.97 if 50 <= i < 100 else 1.0 for i in range(240)]
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    recs += [
        {"kind": "step", "step": i, "t": float(i), "loss": x, "lr": 0.1}
        for i, x in enumerate(losses)
    ]
    recs.append({"kind": "event", "type": "exit", "status": "ok", "step": 239})
    eng = _engine(recs)
    (a,) = _of(eng, "plateau")
    assert eng.plateau_rule.judged and a.severity == "warning"
    assert a.title == "Loss plateau (not learning)" and a.evidence["whole_run"] is False
    assert "no progress over the last 75 % of the run (steps 60-239)" in a.message


def _learned_then(tail: list[float]) -> list[dict[str, Any]]:
    """A run that fell from 2.0 to 1.0 over its first 100 steps, then logged ``tail``."""
    losses = [1.0 + 0.5 ** (i / 10) for i in range(100)] + tail
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    recs += [
        {"kind": "step", "step": i, "t": float(i), "loss": x + 0.002 * (-1) ** i, "lr": 0.1}
        for i, x in enumerate(losses)
    ]
    recs.append({"kind": "event", "type": "exit", "status": "ok", "step": len(losses) - 1})
    return recs


def test_a_tail_lower_in_the_middle_by_luck_that_ends_where_it_was_stopped_learning() -> None:
    """Its last three quarters in thirds: 1.0, 0.97, 1.005. The middle third is 3 % lower
    (more than min_improvement), but the run ended no lower than the tail began and the
    rank test reads no fall at all: no progress (two public runs labelled plateau, an
    LSTM at chance and a hydrology model predicting the mean, looked like this)."""
    eng = _engine(_learned_then([1.0] * 100 + [0.97] * 100 + [1.005] * 100))
    (a,) = [a for a in _of(eng, "plateau") if a.severity == "warning"]
    assert a.title == "Loss plateau (stopped learning early)"
    assert a.evidence["improvement"] >= 0.01 and a.evidence["rank_z"] <= 0
    assert "no progress over the last 75 % of the run" in a.message
    assert "its thirds show no fall at all (rank test z" in a.message


def test_a_tail_that_ends_lower_or_falls_in_rank_is_still_learning() -> None:
    """The same dip, but the last third 1.5 % below the first (a slow creep under noise),
    or a fall the rank test sees: not called stuck."""
    ended_lower = _learned_then([1.0] * 100 + [0.97] * 100 + [0.985] * 100)
    assert [a for a in _of(_engine(ended_lower), "plateau") if a.severity == "warning"] == []
    falling = _learned_then([1.0] * 100 + [0.97] * 100 + [0.995] * 100)
    assert [a for a in _of(_engine(falling), "plateau") if a.severity == "warning"] == []


def test_the_whole_run_verdict_comes_at_the_end_of_the_log_but_not_after_a_crash() -> None:
    """A log with no exit record is judged when `check` reaches its end (another tool's
    log never has one); a live viewer asks only once the run is over. A crash says more."""
    ended = RuleEngine(Config.load())
    ended.feed_many(_short(AT_CHANCE, end=None))
    assert _of(ended, "plateau") == []  # still running, as far as the records go
    ended.finish()
    (a,) = _of(ended, "plateau")
    assert a.severity == "warning" and a.evidence["whole_run"] is True
    assert _of(_engine(_short(AT_CHANCE, end="exception")), "plateau") == []


def test_a_short_run_that_learned_or_whose_eval_improved_is_quiet() -> None:
    learned = [1.4 * 0.97**i for i in range(12)]  # 30 % lower at the end, noisy or not
    assert _of(_engine(_short(learned)), "plateau") == []
    recs = _short(AT_CHANCE)
    recs[-1:-1] = [
        {"kind": "eval", "step": 100, "loss": 1.40},
        {"kind": "eval", "step": 1200, "loss": 1.20},
    ]
    assert _of(_engine(recs), "plateau") == []
    assert _of(_engine(_short(AT_CHANCE[:7])), "plateau") == []  # 7 losses: too few to judge


# ------------------------------------------------------------------ metric_mismatch


def _evals(rows: list[dict[str, float]]) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "t"}]
    for i, row in enumerate(rows):
        step = 100 * (i + 1)
        recs.append({"kind": "step", "step": step, "loss": 0.5 / (i + 1)})
        recs.append({"kind": "eval", "step": step, **row})
    return recs


def test_an_eval_loss_that_falls_ninefold_while_wer_worsens_is_a_warning() -> None:
    rows = [
        {"loss": 0.0054, "wer": 98.9},
        {"loss": 0.0012, "wer": 99.5},
        {"loss": 6e-4, "wer": 99.7},
    ]
    (a,) = _of(_engine(_evals(rows)), "metric_mismatch")
    assert a.severity == "warning" and a.step == 300
    assert a.evidence["metrics"] == {"wer": [98.9, 99.7]} and a.evidence["eval_loss_drop"] > 0.85
    assert "wer 98.9 -> 99.7" in a.message


def test_accuracy_exactly_one_from_the_first_evaluation_is_named_as_such() -> None:
    rows = [{"loss": 1.6e-3, "eval_accuracy": 1.0}] + [{"loss": 1e-4, "eval_accuracy": 1.0}] * 3
    (a,) = _of(_engine(_evals(rows)), "metric_mismatch")
    assert a.evidence["metric_first_values_perfect"] is True


def test_a_metric_that_improves_later_withdraws_it_and_healthy_runs_stay_quiet() -> None:
    rows = [{"loss": 1.0, "f1": 0.5}, {"loss": 0.4, "f1": 0.5}, {"loss": 0.3, "f1": 0.49}]
    assert len(_of(_engine(_evals(rows)), "metric_mismatch")) == 1
    rows.append({"loss": 0.3, "f1": 0.7})
    assert _of(_engine(_evals(rows)), "metric_mismatch") == []
    learning = [{"loss": 1.0 / (i + 1), "accuracy": 0.5 + 0.1 * i} for i in range(4)]
    assert _of(_engine(_evals(learning)), "metric_mismatch") == []
    small_drop = [{"loss": 1.0 - 0.1 * i, "accuracy": 0.5} for i in range(4)]  # 30 %: not half
    assert _of(_engine(_evals(small_drop)), "metric_mismatch") == []
    unknown = [{"loss": 1.0 / (i + 1), "num_tokens": 5.0} for i in range(4)]  # no direction
    assert _of(_engine(_evals(unknown)), "metric_mismatch") == []


@pytest.mark.parametrize(
    ("name", "sign"),
    [
        ("accuracy", 1), ("eval_mean_token_accuracy", 1), ("rouge-1", 1), ("rougeLsum", 1),
        ("bleu-4", 1), ("f1_macro", 1), ("val/acc_epoch", 1), ("wer", -1), ("wer_ortho", -1),
        ("cer", -1), ("rmse", -1), ("val_loss", 0), ("mse_loss", 0), ("num_tokens", 0),
        ("gen_len", 0), ("runtime", 0),
    ],
)  # fmt: skip
def test_a_metric_direction_comes_from_the_words_of_its_name(name: str, sign: int) -> None:
    assert direction(name) == sign


def test_hostile_metric_names_are_capped() -> None:
    rows = [
        {"loss": 1.0 / (i + 1), **{f"acc_{k}_" + "x" * 5000: 0.5 for k in range(100)}}
        for i in range(3)
    ]
    eng = _engine(_evals(rows))
    assert len(eng.metric_rule.metrics) == 16
    assert all(len(n) <= 200 for n in eng.metric_rule.metrics)
    (a,) = _of(eng, "metric_mismatch")
    assert all(len(n) <= 40 for n in a.evidence["metrics"]) and len(a.message) < 600


# ------------------------------------------------------------------ the public runs they came from


@pytest.mark.parametrize(
    ("rel", "alert_id", "severity"),
    [
        ("hf/vall-valentine__course-work-4__model.json", "overfitting", "info"),
        ("hf/ChaYKoon__whisper-th-medium__checkpoint-300.json", "metric_mismatch", "warning"),
        ("hf/amodh-saxena__toxic_message_analyzer__results-checkpoint-500.json", "metric_mismatch", "warning"),
    ],
)  # fmt: skip
def test_the_public_runs_are_named(rel: str, alert_id: str, severity: str, capsys: Any) -> None:
    path = REALRUNS / rel
    if not path.is_file():
        pytest.skip(f"no {path} (the shared real-runs folder is not checked out)")
    _, out = check_json(capsys, path)
    assert [a["severity"] for a in out["alerts"] if a["id"] == alert_id] == [severity], out


def test_the_public_run_at_chance_is_not_learning(capsys: Any) -> None:
    pytest.importorskip("tensorboard")
    found = sorted((REALRUNS / "tensorboard").glob("AguLeon__LoRA_RoBERTa_AGNews__runs-run0/*"))
    if not found:
        pytest.skip("no shared/realruns/tensorboard (the shared folder is not checked out)")
    _, out = check_json(capsys, found[0])
    (a,) = [a for a in out["alerts"] if a["id"] == "plateau"]
    assert a["severity"] == "warning" and a["evidence"]["whole_run"] is True
