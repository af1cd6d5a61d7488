"""One path from records to the rules (tui/core/store/pipeline.py): no second module feeds the
engine, and the order (shares, rules, timings, store) holds for every consumer."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from dltop.tui.core.rules import Config
from dltop.tui.core.store import pipeline

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "probe", ROOT / "tui", ROOT / "demos"]


def _calls(attr: str) -> list[str]:
    found = []
    for folder in PRODUCT:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == attr
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_the_pipeline_feeds_the_rules_engine() -> None:
    calls = _calls("feed_many")
    assert calls and all(c.startswith("tui/core/store/pipeline.py:") for c in calls), calls


class _Seen:
    def __init__(self, name: str, order: list[str]) -> None:
        self.name, self.order = name, order

    def feed(self, records: list[dict[str, Any]]) -> None:
        self.order.append(self.name)

    feed_many = feed
    ingest = feed


def test_the_shares_come_first_and_the_store_last() -> None:
    order: list[str] = []
    s, e, t, st = (_Seen(n, order) for n in ("shares", "engine", "times", "store"))
    pipeline.feed([{"kind": "step"}], e, shares=s, times=t, store=st)  # type: ignore[arg-type]
    assert order == ["shares", "engine", "times", "store"]


def test_a_failing_rule_is_an_error_for_the_live_paths() -> None:
    class Broken:
        def feed_many(self, records: list[dict[str, Any]]) -> None:
            raise ZeroDivisionError("bug in a rule")

    error = pipeline.feed_engine(Broken(), [{"kind": "step"}])  # type: ignore[arg-type]
    assert error is not None and "ZeroDivisionError" in error


def test_judge_range_reads_only_up_to_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    lines = ['{"kind":"meta","v":1,"pid":1,"t":0}']
    lines += [f'{{"kind":"step","step":{i},"t":{i},"loss":1.0}}' for i in range(100)]
    data = ("\n".join(lines) + "\n").encode()
    log.write_bytes(data)
    upto = data.index(b'"step":50,')
    upto = data.rindex(b"\n", 0, upto) + 1  # the line end before step 50
    fd = os.open(log, os.O_RDONLY)
    try:
        engine, error, off = pipeline.judge_range(fd, upto, Config.load(), None, 64)
    finally:
        os.close(fd)
    assert error is None and engine is not None and off == upto
    assert engine.last_step == 49
