"""A job's ranks in the viewer, without a UI: the charts across ranks (median line, min–max
band), the rank table, the cross-rank verdicts (straggler, first failure) judged again
and again without touching the ranks' engines, the badges naming their ranks, the focus
cycle, and the directory source that follows every rank file.

Real parts: each rank is a real ``RunModel`` (store + rules engine) fed real records,
and the directory source reads real files on its reader threads.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.core.present.rankjob import (
    BAND,
    CrossRank,
    JobView,
    RankLog,
    job_chart,
    job_signature,
)
from dltop.tui.core.present.view_model import ViewState
from dltop.tui.core.ranks import crossrank
from dltop.tui.core.sources.dirsource import DirectorySource
from dltop.tui.core.store.run import RunModel

T0 = 1_700_000_000.0


def _meta(rank: int) -> dict[str, Any]:
    return {"kind": "meta", "v": 1, "run_id": f"job.rank{rank}", "t": T0, "host": "h",
            "pid": 10 + rank, "rank": rank, "world_size": 3}  # fmt: skip


def _steps(n: int, loss: float = 1.0, data: float = 0.001, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"kind": "step", "step": i, "t": T0 + i * 0.05, "loss": loss, "grad_norm": 1.0,
         "step_time": 0.05, "data_time": data, "compute_time": 0.05 - data}
        for i in range(start, start + n)
    ]  # fmt: skip


def _job(*per_rank: list[dict[str, Any]]) -> list[RankLog]:
    out = []
    for r, records in enumerate(per_rank):
        model = RunModel(f"rank{r}")
        model.ingest([_meta(r), *records])
        out.append(RankLog(r, f"/job/rank{r}.jsonl", model))
    return out


# ------------------------------------------------------------------ charts across ranks


def test_the_chart_draws_the_median_of_the_ranks_over_their_min_max_band() -> None:
    ranks = _job(_steps(100, loss=1.0), _steps(100, loss=2.0), _steps(100, loss=10.0))
    data = job_chart(ranks, "loss", ViewState(smoothing=0.0), 20)
    band, line = data.traces
    assert band.style == BAND and line.name == "loss"
    assert set(line.hi) == {2.0}  # the median rank, not the mean (4.33)
    assert set(band.lo) == {1.0} and set(band.hi) == {10.0}
    assert "loss 2" in data.legend and "max r2 10" in data.legend  # the outlier is named
    assert (data.start, data.end) == (0, 99)


def test_a_nan_on_one_rank_is_marked_on_the_chart_across_ranks() -> None:
    bad = _steps(50)
    bad[30]["loss"] = math.nan
    ranks = _job(_steps(50), bad, _steps(50))
    line = job_chart(ranks, "loss", ViewState(smoothing=0.0), 50).traces[-1]
    assert [i for i, b in enumerate(line.bad) if b] == [30]


def test_ranks_of_different_lengths_span_the_longest() -> None:
    ranks = _job(_steps(100), _steps(40))
    data = job_chart(ranks, "loss", ViewState(smoothing=0.0), 10)
    assert (data.start, data.end) == (0, 99)
    band = data.traces[0]
    assert band.hi[-1] == 1.0  # the buckets only one rank reached still draw


def test_throughput_falls_back_to_steps_per_second_across_ranks() -> None:
    ranks = _job(_steps(20), _steps(20))
    data = job_chart(ranks, "throughput", ViewState(), 10)
    assert data.traces[-1].name == "steps/s" and data.traces[-1].hi[0] == pytest.approx(20.0)


def test_the_signature_changes_with_any_rank_and_with_the_view_only() -> None:
    ranks = _job(_steps(10), _steps(10))
    state = ViewState()
    sig = job_signature(ranks, "loss", state)
    assert job_signature(ranks, "loss", state) == sig  # idle: nothing to redraw
    ranks[1].model.ingest(_steps(1, start=10))
    moved = job_signature(ranks, "loss", state)
    assert moved != sig
    assert job_signature(ranks, "loss", ViewState(cursor=3)) != moved


# ------------------------------------------------------------------ rank table


def test_the_rank_table_names_the_rank_that_waits_for_data() -> None:
    ranks = _job(_steps(60), _steps(60, data=0.03), _steps(60))
    rows = JobView(lambda: ranks).rows(T0 + 10)
    assert [r.name for r in rows] == ["r0", "r1", "r2"]
    assert [r.slowest for r in rows] == [False, True, False]
    assert rows[1].data_wait == "30.0ms" and rows[0].data_wait == "1.0ms"
    assert rows[0].step == "59" and rows[0].step_time == "50.0ms" and rows[0].host == "h"


def _timed(n: int, step: float, data: float) -> list[dict[str, Any]]:
    return [
        {"kind": "step", "step": i, "t": T0 + i * step, "loss": 1.0, "grad_norm": 1.0,
         "step_time": step, "data_time": data, "compute_time": step - data}
        for i in range(n)
    ]  # fmt: skip


def test_slowest_is_never_a_rank_another_takes_longer_per_step_than() -> None:
    # r0 waits 40 ms for data in a 54 ms step; r1 takes 78 ms a step: r1 is the slowest
    ranks = _job(_timed(60, 0.054, 0.040), _timed(60, 0.078, 0.005), _timed(60, 0.054, 0.005))
    rows = JobView(lambda: ranks).rows(T0 + 10)
    assert [r.step_time for r in rows] == ["54.0ms", "78.0ms", "54.0ms"]
    assert [r.slowest for r in rows] == [False, True, False]


def test_no_rank_is_called_slowest_when_none_stands_out() -> None:
    ranks = _job(_steps(60), _steps(60, data=0.0015), _steps(60))
    assert not any(r.slowest for r in JobView(lambda: ranks).rows(T0 + 10))


def test_a_single_log_has_no_rank_table() -> None:
    ranks = _job(_steps(10))
    view = JobView(lambda: ranks)
    assert view.rows(T0) == [] and not view.multi and view.note() == ""


# ------------------------------------------------------------------ cross-rank verdicts


def test_the_straggler_is_judged_across_ranks_and_badged_with_its_rank() -> None:
    ranks = _job(_steps(200), _steps(200, data=0.03), _steps(200))
    view = JobView(lambda: ranks)
    view.update(0.0)
    view.update(5.0)  # judged again: the same verdict, once
    stragglers = [a for a in view.alerts(ranks[0].model) if a.id == "straggler"]
    assert len(stragglers) == 1 and stragglers[0].title.startswith("r1 ")
    assert stragglers[0].evidence["rank"] == 1 and stragglers[0].evidence["phase"] == "data"
    # the verdict lives beside the engines, never in them: `dltop check` owns that path
    assert not any(a.id == "straggler" for r in ranks for a in r.model.alerts())
    assert view.owner(stragglers[0], ranks[0].model) is ranks[1].model


def test_the_judge_thread_gives_the_verdict_when_asked() -> None:
    ranks = _job(_steps(200), _steps(200, data=0.03), _steps(200))
    view = JobView(lambda: ranks)
    view.start()
    try:
        view.poke()
        assert _wait(view.settled)
        assert view.cross.straggler == ranks[1].path and view.error is None
    finally:
        view.stop()


def test_a_huge_backlog_is_fed_a_slice_per_judgement(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long replay catches up over several judgements instead of one long tick."""
    monkeypatch.setattr(crossrank, "FEED_ROWS", 50)
    ranks = _job(_steps(200), _steps(200, data=0.03), _steps(200))
    cross = CrossRank()
    found = []
    for k in range(6):
        cross.update(ranks, float(k * 2))
        found.append(cross.straggler is not None)
    assert found[0] is False and found[-1] is True


def test_the_same_alert_on_several_ranks_is_one_badge_naming_them() -> None:
    nan = _steps(40)
    for rec in nan[20:]:
        rec["loss"] = math.nan
    ranks = _job(nan, _steps(40), [dict(r) for r in nan])
    alerts = [a for a in JobView(lambda: ranks).alerts(ranks[0].model) if a.id == "nan_loss"]
    assert len(alerts) == 1 and alerts[0].title.startswith("r0,2 ")


def _crash(rank: int, t: float, message: str) -> list[dict[str, Any]]:
    return [
        *_steps(30),
        {"kind": "event", "type": "exception", "t": t, "step": 29, "exc_type": "RuntimeError",
         "message": message, "traceback": []},
        {"kind": "event", "type": "exit", "status": "exception", "t": t + 0.01},
    ]  # fmt: skip


def test_the_first_failure_is_named_without_rewriting_the_ranks_engines() -> None:
    ranks = _job(
        _crash(0, T0 + 20, "connection reset by peer"),
        _crash(1, T0 + 21, "connection reset by peer"),
        _crash(2, T0 + 5, "rank 2 broke"),
    )
    view = JobView(lambda: ranks)
    view.update(0.0)
    view.update(0.5)  # not due yet: a second judgement would double the "secondary:" prefix
    view.update(9.0, force=True)
    r0 = [a for a in view.rank_alerts(ranks[0]) if a.id == "crash"][0]
    assert r0.evidence["first_rank"] == 2 and r0.evidence["secondary"] is True
    assert (
        r0.message.startswith("secondary: rank 2 failed first")
        and r0.message.count("secondary:") == 1
    )
    engine_alert = [a for a in ranks[0].model.alerts() if a.id == "crash"][0]
    assert "first_rank" not in engine_alert.evidence and not engine_alert.message.startswith(
        "secondary"
    )
    assert view.crash_model(ranks[0].model) is ranks[2].model  # the banner tells rank 2's crash
    rows = view.rows(T0 + 60)
    assert [r.first_failure for r in rows] == [False, False, True]


# ------------------------------------------------------------------ focus


def test_focus_cycles_through_the_ranks_and_back_to_all() -> None:
    ranks = _job(_steps(10), _steps(10, data=0.03), _steps(10))
    view = JobView(lambda: ranks)
    assert view.across and view.note() == "all 3 ranks"
    seen = [view.cycle() for _ in range(4)]
    assert [r.name if r else None for r in seen] == ["r0", "r1", "r2", None]
    assert view.across
    view.cycle()
    view.cycle()
    assert not view.across and view.note() == "r1 of 3 ranks"
    assert view.owner(None, ranks[0].model) is ranks[1].model
    assert [r.focused for r in view.rows(T0)] == [False, True, False]


# ------------------------------------------------------------------ the directory source


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    with open(path, "ab") as f:
        for rec in records:
            f.write(encode_record(rec))


def _wait(cond: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def test_a_directory_replay_reads_every_rank_into_its_own_model(tmp_path: Path) -> None:
    for r in range(3):
        _write(tmp_path / f"rank{r}.jsonl", [_meta(r), *_steps(10 + r)])
    primary = RunModel("job")
    src = DirectorySource(tmp_path, primary, follow=False)
    src.run()  # a replay returns once every rank is read
    assert [(r.rank, r.model.store.steps) for r in src.ranks] == [(0, 10), (1, 11), (2, 12)]
    assert src.ranks[0].model is primary and len({id(r.model) for r in src.ranks}) == 3


def test_a_rank_file_that_appears_later_is_followed_too(tmp_path: Path) -> None:
    _write(tmp_path / "rank0.jsonl", [_meta(0), *_steps(5)])
    _write(tmp_path / "rank1.jsonl", [_meta(1), *_steps(5)])
    src = DirectorySource(tmp_path, RunModel("job"), poll_interval=0.02)
    src.REFRESH = 0.05
    src.start()
    try:
        assert src.wait_caught_up(20)
        _write(tmp_path / "rank2.jsonl", [_meta(2), *_steps(7)])
        assert _wait(lambda: len(src.ranks) == 3 and src.ranks[2].model.store.steps == 7)
        _write(tmp_path / "rank1.jsonl", _steps(3, start=5))  # every rank is followed
        assert _wait(lambda: src.ranks[1].model.store.steps == 8)
    finally:
        src.stop()
    assert not any(s.alive for s in src.others)


def test_two_files_claiming_one_rank_are_told_apart_by_their_names(tmp_path: Path) -> None:
    for name in ("rank0.jsonl", "rank0-copy.jsonl"):
        _write(tmp_path / name, [_meta(0), *_steps(5)])
    src = DirectorySource(tmp_path, RunModel("job"), follow=False)
    src.run()
    (shown,) = [r for r in src.ranks if r.path == src.chosen.path]  # the newest of the two
    (other,) = [r for r in src.ranks if r is not shown]
    assert shown.name == "r0" and other.name == Path(other.path).name and other.rank is None


def test_a_big_job_table_shows_the_ranks_that_matter_and_counts_the_rest() -> None:
    from dltop.tui.core.present.jobview import RankRow, pick_rows

    def row(i: int, **kw: Any) -> RankRow:
        base = dict(name=f"r{i}", host="h", step="9", step_time="1ms", data_wait="0", memory="",
                    status="running", alerts="—", worst="", slowest=False, focused=False,
                    first_failure=False)  # fmt: skip
        return RankRow(**{**base, **kw})  # type: ignore[arg-type]

    rows = [row(i) for i in range(64)]
    rows[40] = row(40, slowest=True)
    rows[50] = row(50, status="crashed", worst="critical", first_failure=True)
    rows[60] = row(60, worst="warning")
    shown, more = pick_rows(rows)
    names = [r.name for r in shown]
    assert len(shown) == 8 and names == sorted(names, key=lambda n: int(n[1:]))  # rank order
    assert {"r40", "r50", "r60"} <= set(names) and names[0] == "r0"
    assert more == "+56 more: 56 running"
    assert pick_rows(rows[:5]) == (rows[:5], "")


# ------------------------------------------------------------------ the live join's bounds


def _sharded(step: int) -> dict[str, Any]:
    return {"kind": "step", "step": step, "t": T0 + step, "grad_sq_local": 1.0}


def _peer_job(tmp_path: Path, *recs: dict[str, Any]) -> Any:
    from dltop.tui.core.ranks.shardnorm import PeerJoin

    _write(tmp_path / "rank1.jsonl", [{"kind": "meta", "rank": 1, "world_size": 2}, *recs])
    join = PeerJoin(hold_s=60.0)
    join.set_peers([str(tmp_path / "rank1.jsonl")])
    return join


def test_a_peer_that_stopped_early_holds_back_a_bounded_number_of_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 crashed before step 0: every step of rank 0 would wait ``hold_s``; a
    backlog read at full speed must not pile up in memory meanwhile."""
    from dltop.tui.core.ranks import shardnorm as peers

    monkeypatch.setattr(peers, "MAX_HELD", 3)
    join = _peer_job(tmp_path)
    steps = [_sharded(i) for i in range(5)]
    assert join.offer(steps, now=0.0) == steps[:2]  # the oldest, without a norm
    assert len(join.held) == 3 and join.incomplete == 2
    assert not any("grad_norm" in r for r in steps)
    join.close()


def test_an_io_error_on_a_peer_file_leaves_the_step_without_a_norm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The followed rank's reader goes on: its step goes out without a norm."""
    from dltop.tui.core.ranks import shardnorm as peers

    def broken(*_: Any) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(peers.os, "pread", broken)
    join = _peer_job(tmp_path)
    rec = _sharded(0)
    assert join.offer([rec], now=0.0) == [rec] and "grad_norm" not in rec
    assert join.incomplete == 1
    join.close()


def test_a_peer_beyond_the_open_files_is_not_reopened_for_a_step_it_has_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dltop.tui.core.ranks import shardnorm as peers

    monkeypatch.setattr(peers, "MAX_OPEN", 0)
    opened: list[str] = []
    real = peers.open_log
    monkeypatch.setattr(peers, "open_log", lambda p: opened.append(p) or real(p))
    join = _peer_job(tmp_path, *[{**_sharded(i), "grad_sq_local": 3.0} for i in range(3)])
    out = [join.offer([_sharded(i)], now=0.0) for i in range(3)]
    assert [r[0]["grad_norm"] for r in out] == [2.0] * 3
    assert len(opened) == 1  # one read found steps 0-2


def test_waiting_for_a_job_to_catch_up_takes_one_timeout_not_one_per_rank(tmp_path: Path) -> None:
    for r in range(5):
        _write(tmp_path / f"rank{r}.jsonl", [_meta(r), *_steps(3)])
    src = DirectorySource(tmp_path, RunModel("job"), follow=False)  # not started: never caught up
    t0 = time.monotonic()
    assert not src.wait_caught_up(1.0)
    # 5 ranks one after the other would take 5 s: room for a busy machine on either side
    assert time.monotonic() - t0 < 3.0


@pytest.mark.parametrize("log_loss", [False, True])
def test_ranks_at_the_float_limit_are_a_finite_median_and_a_drawable_axis(log_loss: bool) -> None:
    """Two ranks whose loss is 1e308 at the same steps (a hostile or broken log): their
    bucket's mid-point and median were ``0.5 * (a + b)``, an infinity; on a log axis the
    range then spanned 1e300 decades and the tick search walked them one by one, growing
    until the machine ran out of memory (found by fuzzing the app on rank folders)."""
    from dltop.tui.core.present.axis import y_ticks
    from dltop.tui.core.present.chartdata import y_range

    big = _steps(60, loss=1.0)
    for r in big[30:]:
        r["loss"] = 1e308
    ranks = _job(big, [dict(r) for r in big], _steps(60, loss=1.0))
    data = job_chart(ranks, "loss", ViewState(smoothing=False, log_loss=log_loss), 40)
    med = next(t for t in data.traces if t.style != BAND)
    assert max(v for v in med.hi if v is not None) == 1e308
    rng = y_range(data)
    assert rng is not None and all(map(math.isfinite, rng))
    assert (rng[1] - rng[0] < 700) if data.log else rng[1] >= 1e300  # the top: 1e300 at most
    assert y_ticks(rng[0], rng[1], 10, data.log)  # placed, and in bounded time


def test_an_infinite_bucket_value_does_not_size_the_axis() -> None:
    """A trace's values are finite by contract; one that overflowed is left out of the
    range (it sized a log axis of 1e300 decades before), and a log axis wider than floats
    have gets no ticks rather than a walk over every decade."""
    from dltop.tui.core.present.axis import log_ticks
    from dltop.tui.core.present.chartdata import ChartData, Trace, y_range

    trace = Trace("eval", [0.6, math.inf], [0.7, math.inf])
    for log in (False, True):
        data = ChartData(0, 1, (trace,), log=log)
        rng = y_range(data)
        assert rng is not None and rng[1] < 1.0
    assert log_ticks(-5e298, 1.05e300, 5) == []
