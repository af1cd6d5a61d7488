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


def _steps(extra_at: object) -> list[tuple[str, str, int]]:
    """A step extra ``acc``: finite for 300 steps, then what ``extra_at(i)`` gives."""
    e = RuleEngine()
    e.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    for i in range(400):
        rec = {"kind": "step", "step": i, "t": float(i), "loss": 2.0 * math.exp(-i / 200) + 0.1}
        rec.update(extra_at(i))  # type: ignore[operator]
        e.feed(rec)
    return [(a.id, a.severity, a.step) for a in e.alerts() if a.id == "nan_metric"]


def test_a_step_extra_that_goes_nan_is_named_at_its_step() -> None:
    """The block's quick look (every float finite, every name seen) must not hide the
    first NaN of a name it has passed 300 times."""
    got = _steps(lambda i: {"acc": 0.5 if i < 300 else math.nan})
    assert got == [("nan_metric", "warning", 300)]


def test_finite_floats_whose_sum_overflows_raise_nothing() -> None:
    """Two floats near the largest double sum to Inf: the quick look hands the record to
    the exact one, which finds every value finite."""
    assert _steps(lambda i: {"a": 1.5e308, "b": 1.5e308}) == []


def test_a_new_name_that_is_nan_from_its_first_value_is_information() -> None:
    got = _steps(lambda i: {"acc": 0.5} if i < 300 else {"acc": 0.5, "f1": math.nan})
    assert got == [("nan_metric", "info", 300)]


def test_a_name_first_seen_finite_midway_then_nan_is_a_warning() -> None:
    """A name that appears midway with finite values went bad when it turns NaN: the
    block's quick look must hand its first values to the exact one, which remembers it
    was finite (skipped, its NaN would read as never computed: information)."""
    got = _steps(
        lambda i: {"acc": 0.5} if i < 300 else {"acc": 0.5, "f1": 0.5 if i < 350 else math.nan}
    )
    assert got == [("nan_metric", "warning", 350)]


def test_a_name_logged_as_ints_then_nan_is_named() -> None:
    """Ints are never looked at; the first float under that name (a NaN) must be."""
    got = _steps(lambda i: {"tokens": 512 if i < 300 else math.nan})
    assert [(a, s) for a, s, _ in got] == [("nan_metric", "info")] and got[0][2] == 300
