"""Data-loader bound, memory growth, stalls: judged on record timestamps, paused in phases."""

from __future__ import annotations

import math
from typing import Any

from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.window import median_of
from rulekit import Run, alerts_of, noisy, run_engine

MIB = 1 << 20


def test_data_bound_warning_and_critical() -> None:
    (w,) = alerts_of(run_engine(Run(data_share=0.15)), "data_bound")
    assert w.severity == "warning" and w.step <= 50
    assert 0.13 < w.evidence["data_wait_share"] < 0.17
    (c,) = alerts_of(run_engine(Run(data_share=0.6)), "data_bound")
    assert c.severity == "critical"
    assert "waits for data" in c.message


def test_data_bound_needs_a_real_wait() -> None:
    # 30 % of a 1 ms step is 0.3 ms: an in-memory loader on a tiny model, nothing to fix
    assert alerts_of(run_engine(Run(dt=0.001, data_share=0.3)), "data_bound") == []


def test_data_bound_threshold_is_configurable() -> None:
    assert alerts_of(run_engine(Run(data_share=0.15), {"data_bound.warn": 0.2}), "data_bound") == []


def test_non_finite_data_times_are_skipped_not_read_as_all_wait() -> None:
    # a data_time of NaN or Infinity (a clock glitch, a hostile log) says nothing about
    # the loader: every block of such steps is skipped, as a single such step always was
    for bad in (math.inf, math.nan):

        def glitch(rec: dict[str, Any], bad: float = bad) -> dict[str, Any]:
            if rec.get("kind") == "step" and rec["step"] >= 300:
                return {**rec, "data_time": bad}
            return rec

        eng = RuleEngine(Config())
        eng.feed_many(glitch(r) for r in Run(steps=1000).records())
        eng.finish()
        assert alerts_of(eng, "data_bound") == [], bad
        assert eng.data_rule.share and (median_of(eng.data_rule.share) or 0.0) < 0.1
        assert all(x == x and x != math.inf for x in eng.data_rule.dt), bad


def test_data_bound_starting_midway() -> None:
    (a,) = alerts_of(run_engine(Run(share_at=lambda i: 0.5 if i >= 500 else 0.02)), "data_bound")
    assert 500 <= a.evidence["raised_at_step"] <= 550
    # `step` is where the waiting began, not where the window's median crossed the line
    assert 495 <= a.step <= 505 < a.evidence["raised_at_step"]
    (w,) = alerts_of(run_engine(Run(share_at=lambda i: 0.15 if i >= 300 else 0.02)), "data_bound")
    assert 295 <= w.step <= 305 and w.severity == "warning"


def test_memory_leak_on_cuda_allocated() -> None:
    # 2 MiB per step on an 80 GiB device: past 2 % of it (1.6 GiB) after ~800 steps; the
    # leak is there from the start, so the alert holds from the first sample after warm-up
    eng = run_engine(Run(steps=1500, mem_at=lambda i, m: m + 2 * MIB * i))
    (a,) = alerts_of(eng, "memory_growth")
    assert a.severity == "warning" and 800 <= a.evidence["raised_at_step"] <= 900
    assert 50 <= a.step <= 60
    assert a.evidence["growth"] >= 0.02 * 80 * (1 << 30) and a.evidence["r2"] > 0.9
    assert a.evidence["source"] == "cuda"
    assert eng.facts()["mem_growth_per_step"].value > 1.9 * MIB


def test_memory_leak_starting_midway_is_dated_to_its_start() -> None:
    eng = run_engine(Run(steps=2000, mem_at=lambda i, m: m + 2 * MIB * max(0, i - 600)))
    (a,) = alerts_of(eng, "memory_growth")
    assert 1400 <= a.evidence["raised_at_step"] <= 1500
    assert 580 <= a.step <= 620


def test_memory_that_grows_and_is_freed_is_not_a_leak() -> None:
    # a cache that fills for 300 steps and is emptied
    assert (
        alerts_of(
            run_engine(Run(steps=1500, mem_at=lambda i, m: m + MIB * (i % 300))), "memory_growth"
        )
        == []
    )


def test_memory_leak_near_the_limit_is_critical() -> None:
    run = Run(steps=1500, mem=70 * (1 << 30), mem_at=lambda i, m: m + 8 * MIB * i)
    (a,) = alerts_of(run_engine(run), "memory_growth")
    assert a.severity == "critical" and a.evidence["seconds_to_limit"] < 600


def test_stall_while_heartbeats_continue() -> None:
    eng = run_engine(Run(pause_at={500: 120.0}))
    (a,) = alerts_of(eng, "stall")
    assert (a.step, a.severity) == (500, "warning")
    assert a.evidence["seconds_without_step"] >= 60
    assert a.active is False  # training resumed


def test_long_stall_is_critical_while_it_lasts_and_a_warning_once_resumed() -> None:
    """Severity policy: critical while the run waits (it wastes its compute now); after the
    steps came back it is history worth a look."""
    from dltop.tui.core.rules import Config, RuleEngine

    records = list(Run(pause_at={500: 400.0}).records())
    cut = next(i for i, r in enumerate(records) if r["kind"] == "step" and r["step"] == 501)
    eng = RuleEngine(Config.load())
    eng.feed_many(records[:cut])  # the heartbeats of the pause, no step yet
    (a,) = alerts_of(eng, "stall")
    assert a.severity == "critical" and a.active
    eng.feed_many(records[cut:])
    eng.finish()
    (a,) = alerts_of(eng, "stall")
    assert a.severity == "warning" and "then training resumed" in a.message


def test_stall_floor_is_configurable() -> None:
    assert alerts_of(run_engine(Run(pause_at={500: 20.0})), "stall") == []
    (a,) = alerts_of(run_engine(Run(pause_at={500: 20.0}), {"stall.floor_s": 5}), "stall")
    assert a.step == 500


def test_stall_found_after_the_fact_without_heartbeats() -> None:
    (a,) = alerts_of(run_engine(Run(pause_at={500: 90.0}, pause_heartbeats=False)), "stall")
    assert a.step == 500 and a.evidence["resumed"] is True


def test_declared_phase_is_not_a_stall() -> None:
    assert noisy(run_engine(Run(eval_every=300, eval_seconds=500.0))) == []


def test_undeclared_long_evaluation_is_only_information() -> None:
    eng = run_engine(Run(eval_every=300, eval_phase=False, eval_seconds=100.0))
    stalls = alerts_of(eng, "stall")
    assert stalls and all(a.severity == "info" for a in stalls)
    assert "evaluation" in stalls[0].message


def _hang_in_phase(seconds: float, overrides: dict | None = None) -> tuple[object, float]:
    """600 healthy steps, then a declared eval phase that never ends; heartbeats go on."""
    from dltop.tui.core.rules import Config, RuleEngine

    eng = RuleEngine(Config.load(None, overrides))
    eng.feed_many(Run(steps=600, end=None).records())
    t = eng.last_t
    eng.feed(
        {"kind": "event", "type": "phase", "name": "eval", "state": "begin", "t": t, "step": 599}
    )
    for k in range(1, int(seconds / 2.0) + 1):
        eng.feed({"kind": "heartbeat", "t": t + 2.0 * k, "step": 599})
    return eng, t


def test_a_hang_inside_a_declared_phase_is_still_a_stall() -> None:
    eng, t = _hang_in_phase(400.0)
    (a,) = alerts_of(eng, "stall")  # type: ignore[arg-type]
    assert (a.step, a.severity, a.active) == (599, "warning", True)
    assert a.evidence["phase"] == "eval" and a.evidence["seconds_in_phase"] >= 300
    assert "in phase 'eval'" in a.message
    eng, t = _hang_in_phase(1000.0)
    (a,) = alerts_of(eng, "stall")  # type: ignore[arg-type]
    assert a.severity == "critical"  # 3x the phase cap


def test_the_phase_cap_is_configurable() -> None:
    eng, _ = _hang_in_phase(400.0, {"stall.phase_floor_s": 1200.0})
    assert alerts_of(eng, "stall") == []  # type: ignore[arg-type]


def test_a_long_phase_that_ends_is_information() -> None:
    # a 500 s evaluation is past the 300 s cap while it runs, then ends normally: slow, not hung
    eng = run_engine(Run(eval_every=300, eval_seconds=500.0))
    stalls = alerts_of(eng, "stall")
    assert stalls and all(a.severity == "info" for a in stalls)
    assert "ended normally" in stalls[0].message and "eval" in stalls[0].title
