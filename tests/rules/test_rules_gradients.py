"""Vanishing gradients and dead units, from layers records, gated on failing progress."""

from __future__ import annotations

from typing import Any

from rulekit import Run, alerts_of, noisy, run_engine

STUCK = {"tau": 1e9, "noise": 0.02}  # the loss does not move at all


def vanishing(i: int, lay: dict[str, Any]) -> dict[str, Any]:
    lay["grad_norm"] = [3e-7, 1e-5, 1e-3, 0.1, 0.4]
    return lay


def dead(i: int, lay: dict[str, Any]) -> dict[str, Any]:
    lay["zero_frac"] = [0.02, 0.93, 0.95, 0.01, 0.0]
    return lay


def test_vanishing_gradients_while_stuck() -> None:
    eng = run_engine(Run(layers_at=vanishing, **STUCK))
    (a,) = alerts_of(eng, "vanishing_grad")
    assert a.severity == "warning" and a.step <= 150
    assert a.evidence["first_layer"] == "layer0.weight"
    assert a.evidence["last_layer"] == "layer3.weight"  # weights only: the head's bias is skipped
    assert a.evidence["ratio"] < 1e-3
    assert eng.facts()["first_last_grad_ratio"].value < 1e-3


def test_vanishing_ratio_is_not_an_alarm_while_the_loss_improves() -> None:
    eng = run_engine(Run(layers_at=vanishing))
    assert noisy(eng) == []


def test_dead_units_while_stuck() -> None:
    eng = run_engine(Run(layers_at=dead, **STUCK))
    (a,) = alerts_of(eng, "dead_units")
    assert a.severity == "warning" and a.step <= 150
    assert a.evidence["layer"] == "layer2.weight" and a.evidence["zero_frac"] == 0.95
    assert a.evidence["dead_layers"] == ["layer1.weight", "layer2.weight"]
    assert eng.facts()["zero_grad_fraction_max"].value == 0.95


def test_dead_units_ignored_while_learning_and_in_embeddings() -> None:
    def emb(i: int, lay: dict[str, Any]) -> dict[str, Any]:
        lay["names"][0] = "embed.weight"
        lay["zero_frac"][0] = 0.99
        return lay

    assert noisy(run_engine(Run(layers_at=dead))) == []
    assert alerts_of(run_engine(Run(layers_at=emb, **STUCK)), "dead_units") == []


def test_parameters_without_gradient_are_information_unless_stuck() -> None:
    def no_grad(i: int, lay: dict[str, Any]) -> dict[str, Any]:
        lay["no_grad"] = ["pooler.weight", "pooler.bias"]
        return lay

    (a,) = alerts_of(run_engine(Run(layers_at=no_grad)), "dead_units")
    assert a.severity == "info" and a.evidence["layers_without_grad"] == [
        "pooler.weight",
        "pooler.bias",
    ]
    (b,) = alerts_of(run_engine(Run(layers_at=no_grad, **STUCK)), "dead_units")
    assert b.severity == "warning"


def test_a_few_zero_grad_norms_do_not_end_a_dead_units_alert() -> None:
    """The zero-grad-norm check shares dead_units' episode: a short run of zeros (a
    trainer's skipped steps) ending must not clear the dead-units alert it did not raise."""
    zeros = Run(steps=320, layers_at=dead, gn_at=lambda i, g: 0.0 if 300 <= i < 303 else g, **STUCK)
    (a,) = alerts_of(run_engine(zeros), "dead_units")
    assert a.title == "Dead units" and a.step <= 150 and a.active, a
