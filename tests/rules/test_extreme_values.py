"""Losses and grad norms anywhere in the float range never make a rule raise.

The rules take exponents of log differences and noise spreads (thresholds, ratios,
evidence); a broken or hostile log's values can span 5e-324 to 1e308, a log ratio of
1 453, past what ``math.exp`` takes. Each case once raised ``OverflowError`` (a
traceback in ``dltop check``, the viewer's diagnosis stopped)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.check_file import check_file
from dltop.tui.check_output import as_json, verdict_of
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.rules import Config, RuleEngine

TINY, HUGE = 5e-324, 1e308


def _wild(i: int) -> float:
    return HUGE if i % 2 else TINY


def _jump(i: int) -> float:
    return TINY if i < 5 else HUGE


def _steady(i: int) -> float:
    return 1.0 + 0.01 * (i % 7)


@pytest.mark.parametrize(
    ("loss", "grad_norm"),
    [(_wild, _steady), (_steady, _wild), (_wild, _wild), (_jump, _steady), (_jump, _jump)],
    ids=["wild loss", "wild grad norm", "both wild", "loss jumps", "both jump"],
)
def test_values_across_the_float_range_never_raise(
    loss: Callable[[int], float], grad_norm: Callable[[int], float]
) -> None:
    e = RuleEngine()
    e.feed({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})
    for i in range(600):
        rec = {"kind": "step", "step": i, "t": 0.1 * i, "loss": loss(i), "lr": 1e-3}
        rec["grad_norm"] = grad_norm(i)
        e.feed_many([rec])
    e.finish()
    run_state(e, 1e9, False)
    for a in e.alerts():
        assert a.id and a.title  # evidence may hold inf: the readers print it as such
    assert e.facts() is not None
    assert not math.isnan(e.loss_hi)


def test_check_reads_such_a_log_and_says_it_in_json(tmp_path: Path) -> None:
    log = tmp_path / "wild.jsonl"
    with open(log, "wb") as f:
        f.write(encode_record({"kind": "meta", "v": 1, "pid": 1, "t": 0.0}))
        for i in range(600):
            rec = {"kind": "step", "step": i, "t": 0.1 * i, "loss": _wild(i)}
            f.write(encode_record(rec | {"grad_norm": _wild(i + 1)}))
    result = check_file(str(log), Config.load())
    json.dumps(as_json(str(log), [result], verdict_of([result])), allow_nan=False)
