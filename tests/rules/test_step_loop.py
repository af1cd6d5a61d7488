"""The engine's fast path for plain steps (``rules/steploop.py``) changes nothing it decides.

``feed_many`` takes runs of plain step records with the engine's state in locals; ``feed``
takes one record at a time through ``_on_step``. Fed the same records (in batches of any
size against one by one) they must leave the same alerts (every field), facts, status and
per-step state. The logs: the synthetic faults of the same-answers test, the same runs with
records perturbed at random (every kind of not-plain step: a changed, NaN, -0.0, integer
or missing lr; NaN, infinite, integer, string or missing values; steps that repeat, go
back or are not ints; phases; events that end blocks), and the fault suite's quick logs.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.decoding import read_records
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.rules import RuleEngine
from rulekit import Run, lr_step
from test_same_answers import RUNS

STATE = (
    "steps", "records", "step", "first_step", "last_step", "first_t", "last_t",
    "last_step_t", "loss", "gn", "lr", "lr_prev", "loss_finite", "gn_finite",
    "last_finite_gn", "phase_ended", "loss_hi", "gn_hi", "gn_warn", "lr_max",
    "first_nonfinite_step", "loss_max_jump_ratio", "gn_max_seen",
)  # fmt: skip


def _verdict(e: RuleEngine) -> str:
    alerts = [a.to_json() for a in e.alerts()]
    facts = {k: repr(v) for k, v in sorted(e.facts().items())}
    state = {k: repr(getattr(e, k)) for k in STATE}
    status = run_state(e, now=2_000_000_000.0, pid_alive=False)
    return json.dumps([alerts, facts, state, repr(status)], sort_keys=True, default=repr)


def _state(e: RuleEngine) -> str:
    """The per-step state and the open block, as a rule would read them at a block end."""
    b = e.blk
    block = (b.steps, b.t, b.loss, b.gn, b.timing, b.t0, len(b.recs))
    return repr(([getattr(e, k) for k in STATE], e.t, block, len(e.alerts())))


def _both(
    records: list[dict[str, Any]], seed: int, cuts: frozenset[int] = frozenset()
) -> tuple[str, str]:
    """Both engines fed the same records, the batch engine in batches of 1 to 3000 (a live
    tick or a replay chunk) that also end right after each record in ``cuts``; their
    state compared after every batch, their verdicts at the end."""
    one = RuleEngine()
    many = RuleEngine()
    r = random.Random(seed)
    i = 0
    while i < len(records):
        k = r.choice((1, 2, 7, 50, 333, 3000))
        k = next((j - i + 1 for j in range(i, i + k) if j in cuts), k)
        batch = records[i : i + k]
        for rec in batch:
            one.feed(dict(rec))
        many.feed_many([dict(rec) for rec in batch])
        i += k
        assert _state(many) == _state(one), f"after record {i}"
    one.finish()
    many.finish()
    return _verdict(one), _verdict(many)


def _odd(rec: dict[str, Any], r: random.Random) -> dict[str, Any]:
    """One step record made not plain in one of the ways the fast path must notice."""
    rec = dict(rec)
    how = r.randrange(16)
    if how == 0:
        rec["lr"] = (rec.get("lr") or 0.1) * 3  # a jump
    elif how == 1:
        rec["lr"] = math.nan
    elif how == 2:
        rec["lr"] = -0.0
    elif how == 3:
        rec["lr"] = 1  # an int
    elif how == 4:
        rec.pop("lr", None)
    elif how == 5:
        rec["loss"] = r.choice((math.nan, math.inf, -math.inf, 2, "1.5", None))
    elif how == 6:
        rec["grad_norm"] = r.choice((math.nan, math.inf, 3, None, "x"))
    elif how == 7:
        rec["step"] = rec["step"] - r.choice((0, 1, 50))  # repeats or goes back
    elif how == 8:
        rec["step"] = r.choice((True, 3.0, "7", None))
    elif how == 9:
        rec["t"] = r.choice((math.nan, None, 5, "t"))
    elif how == 10:
        rec["loss"] = rec["loss"] * 50  # over the spike line
    elif how == 11:
        rec["grad_norm"] = (rec.get("grad_norm") or 1.0) * 1e4  # over the explosion line
    elif how == 12:
        rec["t"] = rec["t"] + 5.0  # a second of record time: a block end
    elif how == 13:
        rec["loss"] = -1.0
    elif how == 14:
        rec["lr"] = 0.0
    else:
        rec["kind"] = "stepx"  # an unknown kind between steps
    return rec


def _perturbed(run: Run, seed: int, rate: float) -> tuple[list[dict[str, Any]], frozenset[int]]:
    """The run's records with some steps made odd, and where those are."""
    r = random.Random(seed)
    out: list[dict[str, Any]] = []
    odd: set[int] = set()
    for rec in run.records():
        if rec.get("kind") == "step" and r.random() < rate:
            odd.add(len(out))
            out.append(_odd(rec, r))
        else:
            out.append(rec)
        if rec.get("kind") == "step" and r.random() < rate / 4:
            state = r.choice(("begin", "end"))
            out.append({"kind": "event", "type": "phase", "name": "eval", "state": state})
    return out, frozenset(odd)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_synthetic_runs_take_the_fast_path_to_the_same_state(name: str) -> None:
    records = list(RUNS[name].records())
    one, many = _both(records, seed=len(name))
    assert many == one


@pytest.mark.parametrize("seed", range(12))
def test_perturbed_runs_take_the_fast_path_to_the_same_state(seed: int) -> None:
    run = Run(steps=1200, seed=seed, lr=lr_step(0.1, 400, 0.3), noise=0.2, eval_every=150)
    records, odd = _perturbed(run, seed, rate=(0.002, 0.02, 0.1)[seed % 3])
    one, many = _both(records, seed)
    assert many == one
    one, many = _both(records, seed, cuts=odd)  # the state right after each odd step
    assert many == one


def test_a_zero_lr_written_as_minus_zero_is_taken_as_written() -> None:
    records = list(Run(steps=300, seed=3, lr=lambda i: 0.0 if i % 7 else -0.0).records())
    one, many = _both(records, seed=3, cuts=frozenset(range(len(records))))
    assert many == one


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fault_suite_logs_take_the_fast_path_to_the_same_state(
    quick_fault_logs: list[Path],
) -> None:
    assert len(quick_fault_logs) >= 7
    for i, log in enumerate(quick_fault_logs):
        records = read_records(str(log))[0]
        one, many = _both(records, seed=i)
        assert many == one, log.name


def _with_clock_records(run: Run, seed: int) -> list[dict[str, Any]]:
    """The run's records with a sys sample after most steps (RSS growing, no CUDA memory:
    the memory rule reads it) and extra heartbeats, some of them mistyped."""
    r = random.Random(seed)
    out: list[dict[str, Any]] = []
    rss = 2e9
    for rec in run.records():
        rec = {k: v for k, v in rec.items() if not k.startswith("mem_")}
        out.append(rec)
        if rec.get("kind") != "step":
            continue
        rss += r.uniform(0, 3e6)
        if r.random() < 0.9:
            out.append({"kind": "sys", "t": rec["t"] + 0.001, "rss": rss, "mem_available": 6e10})
        if r.random() < 0.7:
            hb: dict[str, Any] = {"kind": "heartbeat", "t": rec["t"] + 0.002, "step": rec["step"]}
            if r.random() < 0.05:
                hb["t"] = r.choice((math.nan, None, "t", 5))
            out.append(hb)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_clock_records_between_steps_leave_the_same_state(
    seed: int,
) -> None:
    """A pause told only by heartbeats (a stall raised, then cleared by the next step)
    and RSS samples between most steps: every run of plain steps is short, and each
    clock record's hooks read the state the fast path wrote back."""
    run = Run(steps=1500, seed=seed, noise=0.2, pause_at={700: 120.0})
    records = _with_clock_records(run, seed)
    one, many = _both(records, seed)
    assert many == one
    eng = RuleEngine()
    eng.feed_many(records)
    eng.finish()
    assert "stall" in {a.id for a in eng.alerts()}  # the clock was judged: not vacuous
