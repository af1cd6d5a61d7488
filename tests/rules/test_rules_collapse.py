"""loss_collapsed's block path: the usual block (no zero, the start and the decimals
known) goes straight to ``_stretch``; ``_take`` one loss at a time must leave the rule in
the same state, on losses that repeat, creep, jump and hit zero."""

from __future__ import annotations

import random

import pytest
from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.rules.collapse import LossCollapse
from dltop.tui.core.rules.window import finite_losses

_STATE = ("c_from", "c_n", "c_lo", "c_hi", "zero_from", "zeros", "since_zero", "sampled")


def _losses(seed: int, n: int = 3000) -> list[float]:
    rng = random.Random(seed)
    out, x = [], 2.0
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            pass  # the same value again: a stretch goes on
        elif r < 0.5:
            x *= 1 + rng.choice([1e-6, -1e-6, 5e-5, -5e-5])  # within rel_tol, or not
        elif r < 0.51:
            x = rng.choice([0.0, -0.0, 0.25])
        else:
            x = abs(x + rng.gauss(0, 0.05)) + 1e-3
        out.append(round(x, rng.choice([4, 12])))
    return out


def _states(losses: list[float]) -> list[tuple[object, ...]]:
    e = RuleEngine()
    out = []
    for i, x in enumerate(losses):
        e.feed({"kind": "step", "step": i, "t": float(i), "loss": x})
        if i % 10 == 9:
            out.append(tuple(getattr(e.collapse_rule, k) for k in _STATE))
    e.finish()
    out.append(tuple((a.id, a.step, a.severity, a.message) for a in e.alerts()))
    return out


def _one_at_a_time(self: LossCollapse, e: RuleEngine, b: object) -> None:
    steps, losses = finite_losses(b)  # type: ignore[arg-type]
    for step, x in zip(steps, losses, strict=True):
        self._take(step, x)
    if steps:
        self._judge(e, steps[-1])


def test_the_block_path_leaves_the_state_taking_one_loss_at_a_time_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for seed in range(5):
        xs = _losses(seed)
        fast = _states(xs)
        with monkeypatch.context() as m:
            m.setattr(LossCollapse, "on_block", _one_at_a_time)
            slow = _states(xs)
        assert fast == slow, seed
