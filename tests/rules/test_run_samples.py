"""The run-wide samples divergence and plateau keep for their end-of-run judgements, and
divergence's grad-norm counts, are what taking the run one value at a time gives.

Both rules take a block's values at once (``window.take_every``, ``list.count``); this
recomputes them from the whole run with the plain loop the rules had, on a run long enough
for the samples to halve several times, with NaN losses and zero grad norms. (A loss at or
below zero makes divergence stand down for the rest of the run: not here.)"""

from __future__ import annotations

import math

import pytest
from dltop.tui.core.rules import RuleEngine
from test_rules_sorted_windows import _one_at_a_time


def _plain(values: list[float], cap: int) -> tuple[list[float], int, int]:
    """The one-at-a-time loop ``take_every`` replaced (``test_rules_sorted_windows``)."""
    sample: list[float] = []
    taken, stride = _one_at_a_time(sample, values, 0, 1, cap)
    return sample, taken, stride


def _loss(i: int) -> float:
    if i % 97 == 13:
        return math.nan
    return 2.0 * math.exp(-i / 3000) + 0.05 * math.sin(i)


def _grad(i: int) -> float:
    return 0.0 if i % 7 == 3 else (-0.0 if i % 11 == 4 else 1.0 + 0.1 * math.cos(i))


@pytest.mark.parametrize("steps", [40, 9000])
def test_samples_and_counts_are_the_one_at_a_time_ones(steps: int) -> None:
    e = RuleEngine()
    e.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    recs = [
        {"kind": "step", "step": i, "t": 0.01 * i, "loss": _loss(i), "grad_norm": _grad(i),
         "lr": 1e-3}
        for i in range(steps)
    ]  # fmt: skip
    e.feed_many(recs)
    e.finish()
    finite = [(i, _loss(i)) for i in range(steps) if math.isfinite(_loss(i))]

    div = e.divergence_rule
    sample, taken, stride = _plain([x for _, x in finite], 2048)
    assert (div.sample, div.taken, div.stride) == (sample, taken, stride)
    grads = [_grad(i) for i in range(steps)]
    assert (div.grads, div.zero_grads) == (len(grads), sum(g == 0.0 for g in grads))

    plat = e.plateau_rule
    sample, taken, stride = _plain(finite, 2048)
    assert (plat.sample, plat.taken, plat.stride) == (sample, taken, stride)
    if steps > 5000:
        assert div.stride > 1 and plat.stride > 1  # the halving was exercised
