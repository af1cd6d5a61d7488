"""A log's shape must not decide how long the diagnosis takes: restarts and runs counted.

A file appended by thousands of runs (a sweep writing to one path, an auto-resume loop
that restarts after every NaN) once cost runs² identity compares, and one look at every
alert ever raised at each new segment: 20 k restarts took minutes. These tests count the
work (never time it): each new segment and each new run must cost about the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules import segments as segments_mod
from dltop.tui.core.rules.alerts import AlertSink


class _CountingList(list):  # type: ignore[type-arg]
    """A list that counts the items it hands out by iteration or by slice (a scan); one
    item by its index is a look-up (a tracker reading its own alert), not counted."""

    handed = 0

    def __iter__(self) -> Any:
        for x in super().__iter__():
            _CountingList.handed += 1
            yield x

    def __getitem__(self, i: Any) -> Any:
        got = super().__getitem__(i)
        if isinstance(i, slice):
            _CountingList.handed += len(got)
        return got


def _restarts_after_nan(n: int) -> list[dict[str, Any]]:
    """A loop that restarts from step 0 after each NaN, appending to the same log."""
    out: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    for i in range(n):
        out.append({"kind": "step", "step": 0, "t": float(i), "loss": 1.0})
        out.append({"kind": "step", "step": 1, "t": i + 0.5, "loss": "NaN"})
    return out


def test_each_restart_looks_only_at_the_alerts_of_the_part_that_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 400
    real_init = AlertSink.__init__

    def counting_init(self: AlertSink) -> None:
        real_init(self)
        self.versions = _CountingList()

    monkeypatch.setattr(AlertSink, "__init__", counting_init)
    _CountingList.handed = 0
    eng = RuleEngine(Config())
    eng.feed_many(_restarts_after_nan(n))
    eng.finish()
    nan_alerts = [a for a in eng.alerts() if a.id == "nan_loss"]
    assert len(nan_alerts) == n  # every part's NaN is still reported, on its own step
    # linear: a few looks per alert (it was n² / 2 = 80 000 for 400 restarts)
    assert _CountingList.handed <= 5 * n, _CountingList.handed
    assert len(eng.segments.starts) == segments_mod.MAX_RUNS_KEPT


def test_a_log_appended_by_many_runs_compares_each_run_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    real = segments_mod.run_identity

    def counted(meta: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        return real(meta)

    monkeypatch.setattr(segments_mod, "run_identity", counted)
    n = 300
    records: list[dict[str, Any]] = []
    for i in range(n):
        records.append({"kind": "meta", "v": 1, "pid": 1000 + i, "t": float(i)})
        records.append({"kind": "meta", "v": 1, "pid": 1000 + i, "t": float(i)})  # re-sent
        records.append({"kind": "step", "step": 0, "t": float(i), "loss": 1.0})
    eng = RuleEngine(Config())
    eng.feed_many(records)
    assert calls <= 2 * n, calls  # was n² / 2 (45 000 for 300 runs)
    seg = eng.segments
    assert seg.count == n and len(seg.runs) == segments_mod.MAX_RUNS_KEPT


def test_two_writers_among_many_runs_are_named_with_a_count_of_the_rest() -> None:
    records: list[dict[str, Any]] = []
    for i in range(40):  # 40 runs took the file in turn, then the last two write at once
        records.append({"kind": "meta", "v": 1, "pid": 1000 + i, "t": float(i)})
    for s in range(100):
        records.append({"kind": "step", "step": s // 2 if s % 2 else 500 + s, "t": 50.0 + s})
    eng = RuleEngine(Config())
    eng.feed_many(records)
    (mixed,) = [a for a in eng.alerts() if a.id == "mixed_runs"]
    assert mixed.evidence["runs"] == 40
    assert len(mixed.evidence["pids"]) == segments_mod.MAX_RUNS_KEPT
    assert "and 24 more" in mixed.message


def test_a_run_identity_of_lists_and_objects_is_still_told_apart() -> None:
    """A hostile meta gives a list where the pid belongs, or a megabyte run id: a small
    set key all the same, no TypeError, and the same identity twice is one run."""
    eng = RuleEngine(Config())
    huge = "r" * 1_000_000
    for pid, run_id in (([1, 2], "a"), ({"a": 1}, "a"), ([1, 2], "a"), (7, huge), (7, huge)):
        eng.feed({"kind": "meta", "v": 1, "pid": pid, "run_id": run_id, "t": 0.0})
    assert [m["pid"] for m in eng.segments.runs] == [[1, 2], {"a": 1}, 7]
    assert all(len(repr(k)) < 1000 for k in eng.segments._seen)


def test_the_writers_named_by_mixed_runs_are_cut() -> None:
    """Pids are log text of any length: the message names each in at most 40 characters."""
    records: list[dict[str, Any]] = [
        {"kind": "meta", "v": 1, "pid": c * 1_000_000, "t": 0.0} for c in "xy"
    ]
    for s in range(100):
        records.append({"kind": "step", "step": s // 2 if s % 2 else 500 + s, "t": 1.0 + s})
    eng = RuleEngine(Config())
    eng.feed_many(records)
    (mixed,) = [a for a in eng.alerts() if a.id == "mixed_runs"]
    assert len(mixed.message) < 400 and "x" * 40 + ", " + "y" * 40 in mixed.message
