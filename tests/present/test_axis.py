"""Axes people read without thinking (``tui/core/present/axis.py``, ``timeaxis.py``): round ticks,
as many as the height allows, powers of ten on a log axis, one format per axis that
fits the gutter, and columns uniform in wall time."""

from __future__ import annotations

import math
import re
from array import array

import pytest
from dltop.tui.core.present import axis
from dltop.tui.core.present.chartdata import FLOOR_MARK, ChartData, Trace, floor_note
from dltop.tui.core.present.panels import store_chart
from dltop.tui.core.present.svgchart import render
from dltop.tui.core.present.timeaxis import column_of, move_cursor, time_columns
from dltop.tui.core.present.view_model import ViewState
from dltop.tui.core.store.decimate import NonFinite, bucket_edges, decimate_edges, step_edges
from dltop.tui.core.store.runstore import Store

# (lo, hi, unit): linear ranges as the charts meet them, padded edges and all
RANGES = [
    (0.0, 1.05, ""),
    (0.0, 2.9, ""),
    (0.27, 0.31, ""),
    (2.345, 2.3461, ""),
    (-1.3, 4.7, ""),
    (0.0, 1.5e6, ""),
    (0.0, 3.3e-6, ""),
    (0.0, 336.0, ""),
    (0.0, 0.00105, ""),
    (0.0, 0.105, "s"),
    (0.0, 1.26, "s"),
    (0.0, 17.6 * 2**30, "B"),
    (870 * 2**20, 1.1 * 2**30, "B"),
    (0.0, 105.0, "%"),
]
HEIGHTS = [3, 4, 6, 9, 12, 20, 24, 33, 64]
NUMBER = re.compile(r"^(-?\d+(?:\.(\d+))?)(?:e(-?\d+))?(.*)$")
SCALE = {"": 1.0, "%": 1.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "B": 1.0}
SCALE.update({"KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40})


def _parts(label: str) -> tuple[float, int, str, str]:
    """(value, decimals, exponent suffix, unit suffix) of a label, or a failed test."""
    m = NUMBER.match(label)
    assert m, f"{label!r} is not a whole number with its unit"
    mantissa, decimals, exp, unit = m.groups()
    value = float(mantissa) * (10.0 ** int(exp) if exp else 1.0)
    return value, len(decimals or ""), "e" if exp else "", unit


@pytest.mark.parametrize("lo,hi,unit", RANGES)
def test_linear_ticks_are_round_spaced_and_in_one_format(lo: float, hi: float, unit: str) -> None:
    for rows in HEIGHTS:
        ticks = axis.linear_ticks(lo, hi, rows, unit)
        assert ticks, f"no tick for {lo}..{hi} on {rows} rows"
        spots = [axis.row_of(t.at, lo, hi, rows) for t in ticks]
        # never two on one row or on neighbouring rows
        assert all(b - a >= 2 for a, b in zip(sorted(spots), sorted(spots)[1:], strict=False))
        parts = [_parts(t.label) for t in ticks]
        # one format: the same decimals, exponent style and unit suffix on every label
        assert len({p[1:] for p in parts}) == 1, [t.label for t in ticks]
        for t, (value, _, _, suffix) in zip(ticks, parts, strict=True):
            assert len(t.label) <= axis.LABEL_WIDTH
            assert lo <= t.value <= hi
            # the label says the tick's value: never a cut number
            scale = SCALE[suffix] if unit else 1.0
            assert value * scale == pytest.approx(t.value, rel=1e-9, abs=1e-12 * scale)
        # round: every tick a multiple of one 1/2/5 x 10^k step (in the axis' unit)
        values = [p[0] for p in parts]
        if len(values) > 1:
            step = values[1] - values[0]
            mantissa = step / 10 ** math.floor(math.log10(step))
            assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-6, values


@pytest.mark.parametrize("lo,hi,unit", RANGES)
def test_tick_count_grows_with_height_and_is_at_least_5_at_20_rows(
    lo: float, hi: float, unit: str
) -> None:
    counts = [len(axis.linear_ticks(lo, hi, rows, unit)) for rows in HEIGHTS]
    grown = counts[HEIGHTS.index(6) :]  # below that, where the rows fall decides
    assert grown == sorted(grown), counts
    for rows, n in zip(HEIGHTS, counts, strict=True):
        if rows >= 20:
            assert n >= 5, (rows, n)
        assert n <= max(5, rows // 2)  # about one per 4 rows, not one per row
    assert counts[-1] >= 10  # 64 rows: far more than the old top/middle/bottom


def test_log_ticks_are_exact_powers_of_ten_every_kth_when_many() -> None:
    for lo, hi in [(-4.2, 16.3), (-3.1, 3.1), (-12.0, 0.4), (0.0, 35.2), (-300.0, 300.0)]:
        for rows in (6, 9, 20, 40, 64):
            ticks = axis.log_ticks(lo, hi, rows)
            powers = [t for t in ticks if t.label.startswith("1e")]
            assert powers, (lo, hi, rows)
            if rows >= 20:
                assert len(ticks) >= 5 or len(ticks) == len(range(math.ceil(lo), int(hi) + 1))
            ks = []
            for t in ticks:
                assert re.fullmatch(r"[125]e-?\d+", t.label), t.label
                assert float(t.label) == t.value  # exactly the value it says
                assert t.at == pytest.approx(math.log10(t.value))
                assert len(t.label) <= axis.LABEL_WIDTH
                if t.label.startswith("1e"):
                    k = int(t.label[2:])
                    assert t.value == float(f"1e{k}") and t.at == k
                    ks.append(k)
            # every k-th power, aligned on 1e0: the same stride all along
            strides = {b - a for a, b in zip(ks, ks[1:], strict=False)}
            assert len(strides) <= 1 and all(k % min(strides or {1}) == 0 for k in ks)
            spots = sorted(axis.row_of(t.at, lo, hi, rows) for t in ticks)
            assert all(b - a >= 2 for a, b in zip(spots, spots[1:], strict=False))
    # many decades on a short plot: every k-th power, so the labels still fit
    wide = axis.log_ticks(-4.2, 16.3, 9)
    assert [t.label for t in wide] == ["1e0", "1e10"]


def test_log_axis_under_a_decade_falls_back_to_round_values() -> None:
    ticks = axis.log_ticks(math.log10(0.27), math.log10(2.4), 20)
    assert len(ticks) >= 3
    labels = [t.label for t in ticks]
    assert not any("e" in s for s in labels), labels
    assert len({_parts(s)[1] for s in labels}) == 1  # one number of decimals
    for t in ticks:
        assert t.at == pytest.approx(math.log10(t.value))


def test_labels_never_wider_than_the_gutter_and_a_shorter_format_when_needed() -> None:
    big = axis.linear_ticks(0.0, 1.5e6, 20)
    assert [t.label for t in big][:3] == ["0.0e6", "0.2e6", "0.4e6"]
    tiny = axis.linear_ticks(0.0, 3.3e-6, 20)
    assert all(len(t.label) <= 7 and t.label.endswith("e-6") for t in tiny)
    # plain decimals that would not fit: fewer ticks, never "12345.6"
    odd = axis.linear_ticks(12345.0, 12349.0, 20)
    assert odd and all(len(t.label) <= 7 for t in odd)
    for t in odd:
        assert float(t.label) == t.value


def test_x_step_ticks_are_round_more_on_wide_panels_and_never_overlap() -> None:
    for start, end in [(0, 299), (0, 59), (1234, 1299), (0, 1_234_567), (5, 5), (0, 99_999)]:
        previous = 0
        for cols in (20, 29, 70, 110, 230):
            ticks = axis.step_ticks(start, end, cols)
            assert ticks and len(ticks) >= previous
            previous = len(ticks)
            for (a, s), (b, _) in zip(ticks, ticks[1:], strict=False):
                assert a + len(s) + 2 <= b, ticks  # two blanks between labels
            assert all(a >= 0 and a + len(s) <= cols for a, s in ticks)
            assert len({_parts(s)[1:] for _, s in ticks}) == 1, ticks  # one format
    assert [s for _, s in axis.step_ticks(0, 299, 110)] == ["0", "50", "100", "150", "200", "250"]
    assert [s for _, s in axis.step_ticks(0, 1_234_567, 100)][-1] == "1.2M"


def test_x_time_ticks_read_elapsed_time_in_one_format() -> None:
    def labels(left: float, right: float, cols: int) -> list[str]:
        return [s for _, s in axis.time_ticks(left, right, cols)]

    assert labels(0, 79.9, 50) == ["0s", "30s", "60s"]
    assert labels(0, 0.8, 50) == ["0.0s", "0.2s", "0.4s", "0.6s", "0.8s"]
    assert labels(0, 5000, 50) == ["0h00m", "0h30m", "1h00m"]
    assert labels(0, 3 * 86400, 60) == ["0d", "1d", "2d", "3d"]
    assert labels(0, 1800, 60) == ["0m", "10m", "20m", "30m"]
    assert labels(0, 1800, 80) == ["0m", "5m", "10m", "15m", "20m", "25m", "30m"]
    assert labels(3000, 9000, 60)[0] == "1h00m" and labels(3000, 9000, 60)[-1] == "2h30m"


def _timed_store(stall_after: int = 99, stall: float = 60.0, steps: int = 200) -> Store:
    """Steps every 0.1 s with one stall of ``stall`` seconds after ``stall_after``."""
    store = Store()
    t = 1_700_000_000.0
    records = []
    for i in range(steps):
        t += 0.1 + (stall if i == stall_after + 1 else 0.0)
        records.append(
            {"kind": "step", "step": i, "t": t, "loss": 3.0 if i <= stall_after else 1.0}
        )
    store.ingest(records)
    return store


def test_time_columns_give_a_stall_its_width_and_map_steps_both_ways() -> None:
    store = _timed_store()
    x = time_columns(store.series("t"), 0, 199, 80)
    assert x is not None and len(x.edges) == 81
    assert x.edges[0] == 0 and x.edges[-1] == 200
    assert list(x.edges) == sorted(x.edges)  # never back
    assert x.left == 0.0 and x.right == pytest.approx(79.9)
    # 60 s of 79.9 without a step: about three quarters of the columns are empty
    empty = sum(1 for a, b in zip(x.edges, x.edges[1:], strict=False) if a == b)
    assert 55 <= empty <= 62
    # the first step after the stall sits ~70 s in, ~7/8 of the way across
    col = column_of(x.edges, 100, 80)
    assert col is not None and 68 <= col <= 72
    assert column_of(x.edges, 99, 80) == 9  # 9.9 s in
    # one column to the right of the stall's start crosses the stall in one go
    assert move_cursor(x.edges, 99, 1, 80) == 100
    assert move_cursor(x.edges, 100, -1, 80) < 100
    # the series decimated between those boundaries: the stall's buckets are empty
    d = store.series("loss").decimate_between(x.edges)  # type: ignore[union-attr]
    assert d.width == 80 and d.points == 200
    assert sum(1 for c in d.count if c == 0) == empty


def test_a_clock_that_goes_back_is_clamped_not_bisected_into_disorder() -> None:
    store = Store()
    ts = [10.0, 11.0, 12.0, 5.0, 13.0, 14.0, 15.0, 16.0]  # set back once
    store.ingest([{"kind": "step", "step": i, "t": 1e9 + v, "loss": 1.0} for i, v in enumerate(ts)])
    x = time_columns(store.series("t"), 0, 7, 12)
    assert x is not None and list(x.edges) == sorted(x.edges)
    assert time_columns(None, 0, 7, 12) is None


def test_decimation_between_boundaries_matches_uniform_buckets() -> None:
    ys = array("d", [float((i * 37) % 101) for i in range(1000)])
    ys[500] = math.nan
    xs = array("q", range(1000))
    nf = NonFinite()
    nf.scan(ys, 0)
    blo, bhi = array("d"), array("d")
    from dltop.tui.core.store.decimate import summarize

    summarize(ys, blo, bhi, nf)
    uniform = decimate_edges("y", ys, blo, bhi, nf, bucket_edges(xs, 0, 1000, 0, 999, 40), 0, 999)
    edges = [c * 1000 // 40 for c in range(40)] + [1000]
    between = decimate_edges("y", ys, blo, bhi, nf, step_edges(xs, 0, 1000, edges), 0, 999)
    assert between.lo == uniform.lo and between.hi == uniform.hi
    assert between.marks == uniform.marks and between.count == uniform.count


def test_zeros_on_a_log_axis_are_said_in_the_legend() -> None:
    store = Store()
    store.ingest(
        [
            {"kind": "step", "step": i, "t": 1e9 + i, "grad_norm": 0.0 if 40 <= i < 60 else 1.5}
            for i in range(100)
        ]
    )
    data = store_chart(store, "grad_norm", ViewState(), 50)
    assert data.log and f"{FLOOR_MARK} 0 at floor" in data.legend
    assert floor_note([Trace("x", [-1.0, 2.0], [1.0, 2.0])]) == f"{FLOOR_MARK} ≤0 at floor"
    assert floor_note([Trace("x", [1.0], [2.0])]) == ""
    # the report's chart marks them on its bottom edge too
    svg = render(data, "grad norm")
    assert svg.count('stroke-width="3"') == 10  # 20 steps in 50 buckets of 2 steps


def test_report_charts_tick_like_the_viewer() -> None:
    blown = ChartData(0, 299, (Trace("loss", [1.5, 0.3, 1e30], [2.5, 0.3, 1e35]),), log=True)
    svg = render(blown, "loss")
    labels = re.findall(r'text-anchor="end" fill="#57606a" font-size="11">([^<]+)<', svg)
    powers = [s for s in labels if s.startswith("1e")]
    assert len(powers) >= 3 and all(re.fullmatch(r"1e-?\d+", s) for s in powers)
    steps = re.findall(r'text-anchor="middle" fill="#57606a" font-size="11">(\d+)<', svg)
    assert steps[:3] == ["0", "50", "100"] or steps[:3] == ["0", "100", "200"]


def _stalled_records(stall: float = 60.0) -> list[dict[str, object]]:
    t, out = 1_700_000_000.0, []
    for i in range(200):
        t += 0.1 + (stall if i == 100 else 0.0)
        out.append({"kind": "step", "step": i, "t": t, "loss": 3.0 if i < 100 else 1.0})
    return out


def test_time_mode_reaches_every_panel_and_redraws_on_toggle() -> None:
    from dltop.tui.core.present.panels import panel_signature
    from dltop.tui.core.store.run import RunModel

    model = RunModel("run")
    model.ingest(_stalled_records())
    step, time = ViewState(smoothing=False), ViewState(smoothing=False, x_axis="time")
    assert panel_signature(model, "loss", step) != panel_signature(model, "loss", time)
    by_step = store_chart(model.store, "loss", step, 80)
    by_time = store_chart(model.store, "loss", time, 80)
    assert by_step.x_time is None and by_step.x_name == "step" and not by_step.edges
    assert by_time.x_name == "time" and len(by_time.edges) == 81
    assert sum(v is None for v in by_step.traces[0].hi) == 0
    assert sum(v is None for v in by_time.traces[0].hi) > 50  # the stall's columns
    assert by_time.column_of(100, 40) is not None and by_time.column_of(100, 40) >= 34  # type: ignore[operator]
    # a store without wall-clock times keeps its step axis in time mode
    bare = Store()
    bare.ingest([{"kind": "step", "step": i, "loss": 1.0} for i in range(50)])
    assert store_chart(bare, "loss", time, 80).x_time is None


def test_a_job_follows_its_first_ranks_clock_and_overlays_stay_on_steps() -> None:
    from dltop.tui.core.present.overlay import CLOCKS_DIFFER, overlay_chart
    from dltop.tui.core.present.rankjob import RankLog, job_chart, job_signature
    from dltop.tui.core.ranks.jobs import overlay_runs
    from dltop.tui.core.store.run import RunModel

    models = []
    for _ in range(2):
        m = RunModel("r")
        m.ingest(_stalled_records())
        models.append(m)
    ranks = [RankLog(r, f"/job/rank{r}.jsonl", m) for r, m in enumerate(models)]
    time = ViewState(smoothing=False, x_axis="time")
    assert job_signature(ranks, "loss", time) != job_signature(ranks, "loss", ViewState())
    data = job_chart(ranks, "loss", time, 80)
    assert data.x_name == "time" and sum(v is None for v in data.traces[-1].hi) > 50
    runs = overlay_runs(["/a.jsonl", "/b.jsonl"], models)
    over = overlay_chart(runs, "loss", time, 80)
    assert over.x_name == "step" and CLOCKS_DIFFER in over.legend
    assert CLOCKS_DIFFER not in overlay_chart(runs, "loss", ViewState(), 80).legend
