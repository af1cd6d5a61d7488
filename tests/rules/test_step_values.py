"""A step record's ``step`` means one thing to the rules and to the charts
(``schema.as_step``): an int within ±MAX_STEP, or a whole float; anything else is no step
and the record takes the step after the last one. An int of 400 digits once reached the
memory rule's line fit, where turning it into a float raised (a traceback in
``dltop check``)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.schema import MAX_STEP
from dltop.tui.core.rules import RuleEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from answers import engine_answer  # noqa: E402


def _run(n: int = 400, every: int = 1) -> list[dict[str, Any]]:
    """A run whose memory grows (the memory rule samples and fits a line) and whose
    evaluations come every 50 records; logged every ``every`` steps."""
    out: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    for i in range(n):
        out.append(
            {
                "kind": "step", "step": i * every, "t": 0.5 * i, "loss": 2.0 / (1 + i / 50),
                "grad_norm": 1.0, "lr": 1e-3, "mem_allocated": (1 << 30) + i * (1 << 20),
            }
        )  # fmt: skip
        if i % 50 == 49:
            out.append({"kind": "eval", "step": i * every, "t": 0.5 * i, "loss": 1.0})
    return out


def _answer(records: list[dict[str, Any]], one_at_a_time: bool) -> dict[str, Any]:
    e = RuleEngine()
    recs = copy.deepcopy(records)
    if one_at_a_time:
        for r in recs:
            e.feed(r)
    else:
        e.feed_many(recs)
    e.finish()
    return engine_answer(e)


@pytest.mark.parametrize("one_at_a_time", [False, True])
@pytest.mark.parametrize("bad", [10**400, -(10**400), MAX_STEP, -MAX_STEP, 2**64])
def test_a_step_beyond_max_step_is_no_step(bad: int, one_at_a_time: bool) -> None:
    hostile, absent = _run(), _run()
    for i in (101, 250, 251, 399):  # the memory rule's samples hold some of them
        hostile[i]["step"] = bad
        del absent[i]["step"]
    hostile[-1]["step"] = bad  # an evaluation's step too
    del absent[-1]["step"]
    assert _answer(hostile, one_at_a_time) == _answer(absent, one_at_a_time)


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_a_whole_float_step_is_that_step(one_at_a_time: bool) -> None:
    """Some tools write ``"step": 120.0``: the charts put it at step 120, so do the rules
    (a log written every 10 steps: the step after the last one would be 111)."""
    floats, ints = _run(every=10), _run(every=10)
    for i in range(1, len(floats), 3):
        if floats[i]["kind"] == "step":
            floats[i]["step"] = float(floats[i]["step"])
    assert _answer(floats, one_at_a_time) == _answer(ints, one_at_a_time)
