"""loss_collapsed's block path: the usual block (no zero, the start and the decimals
known) goes through ``_stretch`` with its state in locals; ``_take`` one loss at a time
must leave the rule in the same state, on losses that repeat, creep and jump."""

from __future__ import annotations

import random

from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.rules.collapse import LossCollapse

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


def _states(losses: list[float], one_by_one: bool) -> list[tuple[object, ...]]:
    e = RuleEngine()
    if one_by_one:  # every block the per-loss way

        def fed(self: LossCollapse, steps: list[int], xs: list[float]) -> None:
            for s, x in zip(steps, xs, strict=True):
                self._take(s, x)

        e.collapse_rule._stretch = fed.__get__(e.collapse_rule)  # type: ignore[method-assign]
    out = []
    for i, x in enumerate(losses):
        e.feed({"kind": "step", "step": i, "t": float(i), "loss": x})
        if i % 10 == 9:
            out.append(tuple(getattr(e.collapse_rule, k) for k in _STATE))
    e.finish()
    out.append(tuple((a.id, a.step, a.severity, a.message) for a in e.alerts()))
    return out


def test_the_block_path_leaves_the_state_taking_one_loss_at_a_time_leaves() -> None:
    for seed in range(5):
        xs = _losses(seed)
        assert _states(xs, one_by_one=False) == _states(xs, one_by_one=True), seed
