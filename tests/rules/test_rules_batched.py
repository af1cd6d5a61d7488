"""The rules' batch path (rules/deferred.py) gives the answers of one block at a time.

A batched rule takes many closed blocks in one pass within ``feed_many``; a block closed
by ``feed`` (one record), or a run of fewer than ``BATCH_MIN`` blocks, goes through its
``on_block``. Here the same records go both ways (``feed``: every block alone;
``feed_many`` of the whole run: batches) and the engines must agree on every alert, in the
same order, and on every batched rule's own state, after runs built to hit each branch:
calm and noisy losses, slow waves and a two-cycle that raise the alert, lr jumps (the
grace), NaN losses in the groups, a constant loss, 0.0 beside -0.0, values that overflow.
"""

from __future__ import annotations

import ast
import inspect
import math
import random
from collections import deque
from functools import partial
from typing import Any

import pytest
from dltop.tui.core.rules import Config, RuleEngine, oscillation_batch
from dltop.tui.core.rules import deferred as deferred_mod
from dltop.tui.core.rules.base import Rule
from dltop.tui.core.rules.deferred import Closed
from dltop.tui.core.rules.oscillation_batch import group_stats, group_stats_many
from dltop.tui.core.rules.ruleset import RuleSet
from rulekit import Run, lr_step


@pytest.fixture(params=["python", "numpy"], autouse=True)
def batch_maths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: small batches in Python, and every batch in numpy."""
    if request.param == "numpy":
        monkeypatch.setattr(oscillation_batch, "NUMPY_MIN", 0)
    else:
        monkeypatch.setattr(oscillation_batch, "NUMPY_MIN", 10**9)
    return str(request.param)


def _batched(eng: RuleSet) -> list[Rule]:
    return list(eng.deferred.rules)


def _plain(value: Any) -> Any:
    """A rule's attribute as something ``==`` compares to the bit (floats by repr)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple, deque)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _state(rule: Rule) -> dict[str, Any]:
    skip = {"e", "cfg"}
    out = {k: _plain(v) for k, v in vars(rule).items() if k not in skip and not k.startswith("tr")}
    for i, tr in enumerate(rule.alert_trackers()):
        out[f"tracker{i}"] = (tr.slot, tr.cleared_at, tr.raised_at)
    return out


def _alerts(eng: RuleEngine) -> list[tuple[Any, ...]]:
    return [
        (a.id, a.severity, a.step, a.last_step, a.active, _plain(dict(a.evidence)), a.message)
        for a in eng.alerts()
    ]


def _both_ways(records: list[dict[str, Any]], overrides: dict[str, Any] | None = None) -> None:
    one = RuleEngine(Config.load(overrides=overrides))
    for rec in records:
        one.feed(rec)  # outside a batch: each closed block goes to the rules at once
    one.finish()
    whole = RuleEngine(Config.load(overrides=overrides))
    whole.feed_many(records)
    whole.finish()
    assert _alerts(whole) == _alerts(one)
    for a, b in zip(_batched(one), _batched(whole), strict=True):
        assert _state(b) == _state(a), type(a).__name__


def _steps(
    losses: list[float], lr: list[float] | None = None, **extra: Any
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "t": 1e9}]
    for i, x in enumerate(losses):
        rec = {"kind": "step", "step": i, "t": 1e9 + 0.05 * i, "loss": x, "grad_norm": 1.0}
        if lr is not None:
            rec["lr"] = lr[i]
        rec.update(extra)
        out.append(rec)
    return out


def _noisy(n: int, sigma: float, seed: int = 0) -> list[float]:
    r = random.Random(seed)
    return [(2.0 * math.exp(-i / 2000) + 0.2) * math.exp(sigma * r.gauss(0, 1)) for i in range(n)]


def test_a_batch_is_taken_at_all() -> None:
    """The tests below would pass with a batch path that never runs: count its blocks."""
    eng = RuleEngine()
    taken: dict[str, list[int]] = {}
    for rule in _batched(eng):
        real = rule.on_blocks

        def spy(e: Any, blocks: Any, real: Any = real, into: list[int] | None = None) -> int:
            got: int = real(e, blocks)
            assert into is not None
            into.append(got)
            return got

        into = taken.setdefault(type(rule).__name__, [])
        rule.on_blocks = partial(spy, into=into)  # type: ignore[method-assign]
    eng.feed_many(_timed([0.02] * 20_000))
    eng.settle()
    assert set(taken) == {"Oscillation", "DataBound"}
    for name, got in taken.items():
        assert sum(got) > 1500, name  # of the 2000 blocks


WAVES = [1.0 + 0.6 * math.sin(i / 5) for i in range(6000)]  # waves of 31 steps: the alert
ZIGZAG = [1.0 + (0.5 if i % 2 else -0.5) * (1 + 0.01 * (i % 7)) for i in range(6000)]


@pytest.mark.parametrize(
    "name, losses",
    [
        ("calm", [2.0 * math.exp(-i / 5000) + 0.2 + 1e-4 * (i % 3) for i in range(8000)]),
        ("noisy", _noisy(8000, 0.2)),
        ("very noisy", _noisy(8000, 0.8, seed=3)),
        ("waves", WAVES),
        ("waves, then calm", WAVES + [0.5] * 3000 + WAVES),
        ("two-cycle", ZIGZAG),
        ("constant", [0.7] * 5000),
        ("zero", [0.0] * 3000),
        ("signed zeros", [(-0.0 if i % 3 else 0.0) for i in range(3000)]),
        ("signed zeros and waves", [(-0.0 if i % 3 else 0.0) + w for i, w in enumerate(WAVES)]),
        ("overflow", [(1e308 if i % 2 else -1e308) * (1 + (i % 5)) for i in range(3000)]),
        ("tiny", [5e-324 * (i % 4) for i in range(3000)]),
        (
            "nan gaps",
            [math.nan if i % 17 == 3 or 900 < i < 960 else x for i, x in enumerate(WAVES)],
        ),
        ("inf", [math.inf if i % 101 == 0 else x for i, x in enumerate(_noisy(5000, 0.3))]),
    ],
)
def test_batches_give_the_answers_of_one_block_at_a_time(name: str, losses: list[float]) -> None:
    _both_ways(_steps(losses))


def test_schedule_jumps_hold_the_judgements_in_grace_both_ways() -> None:
    lr = [0.1 * (4.0 if (i // 150) % 2 else 1.0) for i in range(6000)]
    _both_ways(_steps(WAVES, lr))


def _timed(share: list[float | None], step_time: Any = 0.05) -> list[dict[str, Any]]:
    """Steps with a data-wait share each (None: no data_time field), a healthy loss."""
    out = _steps(_noisy(len(share), 0.1))
    for rec, x in zip(out[1:], share, strict=True):
        rec["step_time"] = step_time
        if x is not None:
            rec["data_time"] = x * 0.05 if isinstance(x, float) else x
    return out


BOUND = [0.4 if 2000 <= i < 2600 or 5000 <= i < 5100 else 0.02 for i in range(7000)]


@pytest.mark.parametrize(
    "name, records",
    [
        ("healthy loader", _timed([0.01 + 0.001 * (i % 7) for i in range(6000)])),
        ("bound twice", _timed(BOUND)),
        ("bound from the start", _timed([0.5] * 3000)),
        ("no data times", _timed([None] * 3000)),
        ("some data times", _timed([None if i % 3 else 0.02 for i in range(3000)])),
        ("no step times", _timed([0.02] * 3000, step_time=None)),
        (
            "a NaN and a negative",
            _timed([math.nan if i == 1500 else -0.01 if i == 2500 else 0.02 for i in range(4000)]),
        ),
        ("an int step time", _timed([0.02] * 3000, step_time=1)),
        ("zero step time", _timed([0.02] * 3000, step_time=0.0)),
        ("waits over the step", _timed([3.0 if i % 50 == 0 else 0.02 for i in range(4000)])),
    ],
)
def test_data_wait_batches_give_the_answers_of_one_block_at_a_time(
    name: str, records: list[dict[str, Any]]
) -> None:
    _both_ways(records)


def test_data_wait_in_phases_both_ways() -> None:
    recs = _timed(BOUND)
    for at in (1000, 2300, 5050):  # an eval phase: its steps are not timed
        recs.insert(
            at,
            {
                "kind": "event",
                "type": "phase",
                "name": "eval",
                "state": "begin",
                "t": recs[at]["t"],
            },
        )
        recs.insert(
            at + 40,
            {
                "kind": "event",
                "type": "phase",
                "name": "eval",
                "state": "end",
                "t": recs[at + 40]["t"],
            },
        )
    _both_ways(recs)
    _both_ways(_timed(BOUND), {"data_bound.enabled": False})
    _both_ways(_timed(BOUND), {"data_bound.checks": 3, "data_bound.window": 7})


def test_changed_settings_both_ways() -> None:
    over = {
        "oscillation.block": 7,
        "oscillation.blocks": 9,
        "oscillation.min_blocks": 8,
        "oscillation.checks": 1,
        "oscillation.min_swings": 0,
    }
    _both_ways(_steps(_noisy(5000, 0.3)), over)
    _both_ways(_steps(WAVES), {"oscillation.min_blocks": 50, "oscillation.blocks": 40})
    _both_ways(_steps(WAVES), {"oscillation.enabled": False})


def test_synthetic_runs_with_every_record_kind_both_ways() -> None:
    """Heartbeats, layers, evals, phases and other rules' alerts between the blocks."""
    runs = [
        Run(steps=4000, lr=lr_step(0.1, every=700, gamma=3.0)),
        Run(steps=4000, noise=0.6, loss_at=lambda i, x: x * (1.8 if (i // 60) % 2 else 0.6)),
        Run(steps=3000, loss_at=lambda i, x: math.nan if 1500 <= i < 1520 else x),
        Run(steps=3000, gn_at=lambda i, g: g * (1e4 if i % 400 == 399 else 1)),
    ]
    for run in runs:
        _both_ways(list(run.records()))


def test_alerts_keep_their_order_when_two_rules_raise_in_one_block() -> None:
    """The oscillation (batched, 8th in the engine's order) comes back at step 9119 and a
    metric goes NaN in the same block (``nan_metric``, 11th, one block at a time): the sink
    lists them as one block at a time does, the oscillation first."""
    recs = _steps(WAVES + [0.5] * 3000 + WAVES)
    for rec in recs[1:]:
        rec["acc"] = math.nan if rec["step"] == 9115 else 0.5
    one = RuleEngine()
    for rec in recs:
        one.feed(rec)
    whole = RuleEngine()
    whole.feed_many(recs)
    got = [(a[0], a[5].get("raised_at_step")) for a in _alerts(whole)]
    assert got[-2:] == [("oscillation", 9119), ("nan_metric", 9119)]
    assert _alerts(whole) == _alerts(one)


def test_group_statistics_in_numpy_are_the_same_floats() -> None:
    r = random.Random(7)
    pools = [
        [r.gauss(0, 1) for _ in range(500)],
        [0.0, -0.0] * 250,
        [1e308, -1e308, 5e-324, -5e-324, 1.0] * 100,
        [r.choice([0.0, -0.0, 1.0, 1.0, 2.5]) for _ in range(500)],
        [math.ldexp(r.random(), r.randint(-1070, 1020)) for _ in range(500)],
    ]
    for values in pools:
        for size in (3, 5, 8):
            cut = values[: len(values) // size * size]
            many = group_stats_many(cut, size)
            one = [group_stats(cut[i : i + size]) for i in range(0, len(cut), size)]
            assert [_plain(list(col)) for col in many] == [
                _plain([g[k] for g in one]) for k in range(4)
            ]


READABLE = set(Closed.__slots__) - {"blk"}  # what a batched rule may read of the engine


def _engine_reads(cls: type) -> set[str]:
    tree = ast.parse(inspect.getsource(inspect.getmodule(cls)))  # type: ignore[arg-type]
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "e"
        ):
            found.add(node.attr)
    return found


def test_batched_rules_read_of_the_engine_only_what_a_closed_block_holds() -> None:
    rules = _batched(RuleEngine())
    assert rules, "no rule has a batch path"
    for rule in rules:
        cls = type(rule)
        assert _engine_reads(cls) <= READABLE, (cls.__name__, _engine_reads(cls) - READABLE)
        hooks = {
            name
            for name in ("on_eval", "on_layers", "on_event", "on_sys", "on_time", "on_finish")
            if getattr(cls, name) is not getattr(Rule, name)
        }
        assert not hooks, f"{cls.__name__} has hooks the batch path does not order: {hooks}"
    # the Tracker reads the step and the count of steps: a Closed holds both
    assert {"step", "steps"} <= READABLE


def test_the_reads_check_sees_a_read() -> None:
    class Reader(Rule):
        def on_block(self, e: Any, b: Any) -> None:
            _ = e.fig

    assert "fig" in _engine_reads(Reader)
    assert deferred_mod.BATCH_MIN > 1
