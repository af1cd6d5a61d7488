"""The rules' short cuts give what the long way gives, value for value.

Each short cut skips work a rule's answer provably does not need (a sort, a walk, a set
per record); the proof is in its docstring and the test here holds it on values chosen to
break it: negative, zero, subnormal, huge and non-finite values, equal values, and
settings outside the defaults. ``benchmarks/answers.py compare`` holds the same on every
corpus (2 353 logs), ``benchmarks/instructions.py`` says what each one saves.
"""

from __future__ import annotations

import math
import random
from typing import Any

from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.rules.blowup import step_noise
from dltop.tui.core.rules.divergence import Divergence
from dltop.tui.core.rules.nonfinite_metrics import _all_skipped
from dltop.tui.core.rules.oscillation import _swings, no_swing
from dltop.tui.core.rules.plateau import MIN_WINDOW_LOSSES, Plateau
from dltop.tui.core.rules.window import Block, finite_losses, median_of
from rulekit import Run

_ODD = (0.0, -0.0, 5e-324, -5e-324, 1e308, -1e308, 1.0, -1.0, 0.3, 2.0)


def _value(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.15:
        return rng.choice(_ODD)
    if pick < 0.3:
        return rng.uniform(-3, 3)
    return math.exp(rng.gauss(0, 0.3 if rng.random() < 0.5 else 3))


def test_no_swing_only_where_the_walk_counts_none() -> None:
    rng = random.Random(7)
    said = 0
    for i in range(30_000):
        n = rng.randint(3, 40)
        base = _value(rng)
        xs = (
            [base] * n
            if i % 50 == 0
            else [base * (1 + rng.gauss(0, rng.choice((0.01, 0.1, 0.5)))) for _ in range(n)]
        )
        if i % 7 == 0:
            xs = [_value(rng) for _ in range(n)]
        rel = rng.choice((0.3, 0.0, -0.2, 1e-300, 5.0, rng.random()))
        floor = rng.choice((0.0, -1.0, 1e-9, 0.05, math.inf, rng.random() * abs(base)))
        if no_swing(xs, rel, floor):
            said += 1
            assert _swings(xs, rel, floor) == 0, (xs, rel, floor)
    assert said > 5_000  # the short cut is taken: the test can fail


def _old_all_skipped(recs: list[dict[str, Any]], done: set[str]) -> bool:
    """The block test as it was written before the one-pass loop."""
    for rec in recs:
        for k in rec.keys() - done:
            if type(rec[k]) is float:
                return False
    total = sum([v for rec in recs for v in rec.values() if type(v) is float])
    return total - total == 0.0


def test_the_nan_metric_block_test_is_the_set_based_one() -> None:
    rng = random.Random(3)
    keys = ["kind", "step", "t", "loss", "grad_norm", "lr", "acc", "mem", "tok", "x"]
    kinds = 0
    for _ in range(20_000):
        done = set(rng.sample(keys, rng.randint(0, len(keys))))
        recs = []
        for _ in range(rng.randint(1, 12)):
            rec: dict[str, Any] = {}
            for k in rng.sample(keys, rng.randint(1, len(keys))):
                pick = rng.random()
                if pick < 0.6:
                    rec[k] = (
                        _value(rng) if rng.random() < 0.97 else rng.choice((math.nan, -math.inf))
                    )
                elif pick < 0.8:
                    rec[k] = rng.randint(-(10**400), 10**400) if rng.random() < 0.1 else 3
                else:
                    rec[k] = rng.choice(("step", None, True, [1.0], "NaN"))
            recs.append(rec)
        want = _old_all_skipped(recs, done)
        kinds += want
        assert _all_skipped(recs, done) == want, (recs, done)
    assert 500 < kinds < 19_500  # both answers were reached


def _baselines_checked(seed: int) -> int:
    """Feed one noisy run; after every block, the late noise against the eager one.
    Returns the blocks checked after a baseline was set."""
    eng = RuleEngine()
    div = eng.divergence_rule
    at_base: list[float] = []
    checked = 0
    plain = Divergence.on_block

    def watched(self: Divergence, e: Any, b: Block) -> None:
        nonlocal checked
        base = self.base
        before = list(self.diffs_src)
        spread = e.fig.loss_spread
        plain(self, e, b)
        if self.base != base:  # a new baseline: what the eager code worked out then
            at_base[:] = [step_noise(before) or spread]
        if at_base:
            assert self._noise() == at_base[0]
            checked += 1

    hook = watched.__get__(div)
    eng._block_hooks = [hook if h == div.on_block else h for h in eng._block_hooks]
    eng.feed_many(Run(steps=1500, seed=seed, noise=0.3).records())
    eng.finish()
    return checked


def test_the_divergence_noise_worked_out_late_is_the_noise_at_the_baseline() -> None:
    """The noise allowance is sorted out only when a loss nears the line; it must be the
    value the eager code took when the baseline was set, from the losses kept then."""
    assert all(_baselines_checked(seed) > 50 for seed in range(4))


def _reference_windows(p: Plateau, e: Any, b: Block) -> None:
    """The plateau's windows the long way: every loss one at a time (as before the
    short cut that extends an open window by a whole block)."""
    steps, losses = finite_losses(b)
    if not steps:
        return
    if p.first_step is None:
        p.first_step = steps[0]
    for step, loss in zip(steps, losses, strict=True):
        if not p.cur:
            p.cur_start = step
            span = min(max(e.steps, step - p.first_step + 1), 1 << 62)
            p.cur_len = max(p.window, int(p.frac * span))
        p.cur.append(loss)
        n = len(p.cur)
        if n >= p.cur_len or (n >= MIN_WINDOW_LOSSES and step - p.cur_start + 1 >= p.cur_len):
            p.blocks.append((median_of(p.cur) or 0.0, None, None, p.cur_start))
            p.cur = []


def test_the_plateau_windows_close_where_one_loss_at_a_time_closes_them() -> None:
    """Blocks of 1 to 30 losses, steps 1 to 60 apart, windows of every length the rule
    makes: the windows (start, median) and the open one match the long way's."""
    rng = random.Random(11)
    for trial in range(300):
        eng = RuleEngine()
        fast, slow = eng.plateau_rule, Plateau(eng, lambda: None, lambda: None)
        fast.window = slow.window = rng.choice((3, 10, 50, 200))
        step, closed = rng.randint(0, 100), 0
        for _ in range(rng.randint(5, 80)):
            b = Block()
            for _ in range(rng.randint(1, 30)):
                step += rng.choice((1, 1, 1, 2, 7, 60))
                b.steps.append(step)
                b.loss.append(rng.choice((None, 1.0 + rng.random())))
            eng.steps = b.steps[-1]
            fast.on_block(eng, b)
            _reference_windows(slow, eng, b)
            assert [(w[0], w[3]) for w in fast.blocks] == [(w[0], w[3]) for w in slow.blocks]
            assert (fast.cur, fast.cur_start, fast.cur_len) == (
                slow.cur,
                slow.cur_start,
                slow.cur_len,
            )
            closed = max(closed, len(fast.blocks))
        assert closed > 0 or trial % 10, trial  # windows do close


def test_a_data_share_exactly_at_the_bar_is_judged_at_the_bar() -> None:
    """data-bound sorts its window only when some share reaches ``warn``: a run whose
    every share is exactly ``warn`` (0.1 s of 1 s) must still be named."""
    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    for i in range(300):
        recs.append(
            {"kind": "step", "step": i, "t": float(i), "loss": 2.0 - i / 1000,
             "grad_norm": 1.0, "lr": 0.1, "data_time": 0.1, "step_time": 1.0}
        )  # fmt: skip
    eng = RuleEngine()
    assert eng.data_rule.warn == 0.1
    eng.feed_many(recs)
    eng.finish()
    assert [a.severity for a in eng.alerts() if a.id == "data_bound"] == ["warning"]
