"""nan_metric's severity: a metric that never had a finite value (and is not a loss) is the
metric's own code, information; a loss, or a metric that went bad, is a warning."""

from __future__ import annotations

import math

from dltop.tui.core.rules import RuleEngine


def _run(eval_value: object, name: str = "errors", finite_until: int = -1) -> list[tuple[str, str]]:
    e = RuleEngine()
    e.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    for i in range(400):
        e.feed({"kind": "step", "step": i, "t": float(i), "loss": 2.0 * math.exp(-i / 200) + 0.1})
        if i % 40 == 39:
            v = 0.5 if i < finite_until else eval_value
            e.feed({"kind": "eval", "step": i, "t": float(i), "loss": 1.0, name: v})
    return [(a.id, a.severity) for a in e.alerts()]


def test_a_metric_never_finite_is_information() -> None:
    assert ("nan_metric", "info") in _run(math.nan)


def test_a_loss_never_finite_is_a_warning() -> None:
    assert ("nan_metric", "warning") in _run(math.nan, name="aux_loss")


def test_a_metric_that_went_bad_is_a_warning() -> None:
    assert ("nan_metric", "warning") in _run(math.nan, finite_until=200)


def test_a_finite_metric_raises_nothing() -> None:
    assert not [a for a in _run(0.25) if a[0] == "nan_metric"]


def test_a_metric_nan_at_first_then_finite_is_a_warning() -> None:
    """NaN at the first evaluations, finite after: it was broken for a while (a real run's
    val_ExpRate, NaN at its first 80 of 138 evaluations)."""
    e = RuleEngine()
    e.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    for i in range(400):
        e.feed({"kind": "step", "step": i, "t": float(i), "loss": 2.0 * math.exp(-i / 200) + 0.1})
        if i % 40 == 39:
            e.feed({"kind": "eval", "step": i, "t": float(i), "rate": math.nan if i < 200 else 0.4})
    (a,) = [a for a in e.alerts() if a.id == "nan_metric"]
    assert a.severity == "warning" and not a.active


def _odd_steps(seed: int) -> list[dict[str, object]]:
    """Step records whose other metrics change shape, type and finiteness at random: a
    field missing, an int where a float was, a string, NaN, Inf, a new name."""
    import random

    rng = random.Random(seed)
    out: list[dict[str, object]] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    odd: list[object] = [math.nan, math.inf, -math.inf, 3, "x", True, None, 1e308]
    for i in range(1500):
        rec: dict[str, object] = {"kind": "step", "step": i, "t": float(i), "loss": 1.0 / (i + 1)}
        for name in ("acc", "lr", "tokens_per_s"):
            rec[name] = rng.choice(odd) if rng.random() < 0.01 else rng.random()
        if rng.random() < 0.02:
            del rec["acc"]
        if rng.random() < 0.01:
            rec[f"new_{rng.randrange(40)}"] = rng.choice([0.5, math.nan])
        out.append(rec)
    return out


def test_the_quiet_record_shortcut_changes_no_answer(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A record shaped like a quiet one skips the per-metric pass (nan_metrics._quiet): the
    alerts with it are those without it, on records whose metrics go odd at random."""
    from dltop.tui.core.rules import nan_metrics

    def answers() -> list[tuple[object, ...]]:
        e = RuleEngine()
        e.feed_many(recs)
        e.finish()
        return [(a.id, a.step, a.last_step, a.severity, a.active, a.message) for a in e.alerts()]

    for seed in range(6):
        recs = _odd_steps(seed)
        fast = answers()
        with monkeypatch.context() as m:
            m.setattr(nan_metrics.NonFiniteMetrics, "_quiet", lambda self, rec: None)
            slow = answers()
        assert fast == slow, seed
        assert any(a[0] == "nan_metric" for a in fast), seed  # the test reaches the rule
