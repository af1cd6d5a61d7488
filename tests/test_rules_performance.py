"""Data-loader bound, memory growth, stalls: judged on record timestamps, paused in phases."""

from __future__ import annotations

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


def test_data_bound_starting_midway() -> None:
    (a,) = alerts_of(run_engine(Run(share_at=lambda i: 0.5 if i >= 500 else 0.02)), "data_bound")
    assert 500 <= a.evidence["raised_at_step"] <= 550


def test_memory_leak_on_cuda_allocated() -> None:
    # 2 MiB per step on an 80 GiB device: past 2 % of it (1.6 GiB) after ~800 steps
    eng = run_engine(Run(steps=1500, mem_at=lambda i, m: m + 2 * MIB * i))
    (a,) = alerts_of(eng, "memory_growth")
    assert a.severity == "warning" and 800 <= a.step <= 900
    assert a.evidence["growth"] >= 0.02 * 80 * (1 << 30) and a.evidence["r2"] > 0.9
    assert a.evidence["source"] == "cuda"
    assert eng.facts()["mem_growth_per_step"].value > 1.9 * MIB


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


def test_long_stall_is_critical() -> None:
    eng = run_engine(Run(pause_at={500: 400.0}))
    (a,) = alerts_of(eng, "stall")
    assert a.severity == "critical"


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
