"""The smoothed line: TensorBoard's weight, per step of the x-axis, debiased, broken at
NaN, and never further from the raw series than the bound ``dltop.tui.core.store.smoothing``
states: on a real 38-point Hugging Face log, on the NaN demo, on synthetic series."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from dltop.probe.decoding import read_records
from dltop.tui.core.present.panels import store_chart
from dltop.tui.core.present.view_model import ViewState
from dltop.tui.core.sources.foreign import load
from dltop.tui.core.store import smoothing
from dltop.tui.core.store.runstore import Store
from dltop.tui.core.store.smoothing import WEIGHTS, lag_bound, smooth, step_weight

from tests.foreignkit import REALRUNS

ROOT = Path(__file__).resolve().parents[2]
# two public Trainer states of 38 logged losses each: every 500 steps, and every ~50
SPARSE_LOGS = (
    "hf/Velihh__ML_text__root.json",
    "hf/yevvonlim__CAS4133-hw2__outputs-checkpoint-1876.json",
)


def memory_steps(weight: float, share: float = 0.01) -> int:
    """Steps that hold all but ``share`` of the smoothed value's weight (10 at 0.6): the
    bound the module docstring states for any series."""
    if weight <= 0.0:
        return 1
    return max(1, math.ceil(math.log(share) / math.log(weight)))


def _within_bound(xs: list[int], ys: list[float], weight: float) -> list[str]:
    """Points whose smoothed value leaves the stated bound: within the range of the raw
    values of the last ``memory_steps`` steps, give or take 1 % of the range since the
    last break (the weight older points may still hold)."""
    k = memory_steps(weight, 0.01)
    sm = smooth(xs, ys, weight)
    out = []
    start = 0  # the first point since the last non-finite one
    for i, (x, y, s) in enumerate(zip(xs, ys, sm, strict=True)):
        if not math.isfinite(y):
            assert math.isnan(s), f"a smoothed value at the non-finite point {x}"
            start = i + 1
            continue
        recent = [
            v for xx, v in zip(xs[start : i + 1], ys[start : i + 1], strict=True) if xx > x - k
        ]
        seen = ys[start : i + 1]
        slack = 0.01 * (max(seen) - min(seen)) + 1e-12 * max(map(abs, seen))
        if not (min(recent) - slack <= s <= max(recent) + slack):
            out.append(f"step {x}: raw {y:.4g} smoothed {s:.4g}, last {k} steps {recent}")
    return out


def test_a_steady_trend_lags_by_at_most_the_stated_bound_whatever_the_logging_interval() -> None:
    for weight in WEIGHTS[1:]:
        bound = lag_bound(weight)
        for every in (1, 3, 10, 500):
            xs = list(range(0, 3000 * every, every))
            ys = [2.0 + 0.01 * x for x in xs]  # rises 0.01 per step
            sm = smooth(xs, ys, weight)
            lags = [(y - s) / 0.01 for y, s in zip(ys, sm, strict=True)]
            assert max(lags) <= bound + 1e-6, (weight, every, max(lags))
            assert min(lags) >= -1e-9  # never ahead of the raw series
            if every == 1:  # the bound is reached on a series logged every step
                assert lags[-1] == pytest.approx(bound, rel=1e-3)
        flat = smooth(range(50), [3.0] * 50, weight)
        assert all(v == pytest.approx(3.0) for v in flat)  # debiased: no ramp up from 0


def test_the_weight_is_per_step_so_a_sparse_log_is_not_over_smoothed() -> None:
    dense = smooth(range(550), [1.0] * 500 + [2.0] * 50, 0.9)
    sparse = smooth(range(0, 5500, 10), [1.0] * 500 + [2.0] * 50, 0.9)
    # ten steps after the jump the dense log has come ~65 % of the way, the sparse log
    # (one point per 10 steps) as far in its first point after the jump
    assert dense[509] == pytest.approx(sparse[500], rel=1e-9)
    assert 1.6 < dense[509] < 1.7


@pytest.mark.parametrize("name", SPARSE_LOGS)
@pytest.mark.parametrize("weight", [0.6, 0.9, 0.99])
def test_the_bound_holds_on_a_real_38_point_log(name: str, weight: float) -> None:
    path = REALRUNS / name
    if not path.exists():
        pytest.skip("shared/realruns is not beside the checkout")
    store = Store()
    store.ingest(load(str(path)).records)
    loss = store.series("loss")
    assert loss is not None and len(loss) == 38
    xs, ys = list(loss.xs()), list(loss.ys)
    assert _within_bound(xs, ys, weight) == []
    smoothed = store.smoothed("loss", weight)
    assert smoothed is not None
    assert list(smoothed.ys) == smooth(xs, ys, weight)
    # the legend's "now": the smoothed loss sits near the last losses, not 5x above them
    last = smoothed.ys[-1]
    tail = ys[-3:]
    assert min(tail) * 0.8 <= last <= max(tail) * 1.25 or weight == 0.99


def test_random_walks_with_nan_stretches_keep_the_bound() -> None:
    rng = random.Random(5)
    for trial in range(30):
        x, xs, ys, level = 0, [], [], 1.0
        for _ in range(300):
            x += rng.choice((1, 1, 2, 5, 25))
            level *= math.exp(rng.gauss(0, 0.2))
            ys.append(math.nan if rng.random() < 0.05 else level)
            xs.append(x)
        for weight in (0.6, 0.95):
            assert _within_bound(xs, ys, weight) == [], trial


def test_values_at_the_largest_float_give_a_finite_line_within_them() -> None:
    """The average of finite values is finite; its debiased division rounded past the
    largest float on a loss of 1.8e308 held step after step (10 of 300 points were inf,
    and the chart marked the line NaN). Such a point starts the average again."""
    top = 1.7976931348623157e308
    for ys in ([top] * 300, [-top] * 300, [top, -top] * 150, [top] * 100 + [1.0] * 200):
        xs = list(range(len(ys)))
        for weight in (0.6, 0.9, 0.99):
            out = smooth(xs, ys, weight)
            assert all(math.isfinite(v) for v in out), (ys[:2], weight)
            lo, hi = min(ys), max(ys)  # within the values, but for rounding
            assert lo - 1e-12 * abs(lo) <= min(out) and max(out) <= hi + 1e-12 * abs(hi)


@pytest.fixture(scope="module")
def nan_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NaN demo's log (the same records the paced demo writes, at full speed)."""
    log = tmp_path_factory.mktemp("nan") / "nan.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "dltop.demos.nan", "--fast", "--out", str(log)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"DLTOP_DEMO_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return log


@pytest.mark.slow
def test_no_smoothed_line_across_the_nan_demo_and_the_bound_holds(nan_demo: Path) -> None:
    store = Store()
    records, _ = read_records(str(nan_demo))
    store.ingest(records)
    loss = store.series("loss")
    assert loss is not None and loss.first_nonfinite() is not None
    xs, ys = list(loss.xs()), list(loss.ys)
    for weight in WEIGHTS[1:]:
        assert _within_bound(xs, ys, weight) == [], weight
    # the chart: no bucket that holds only NaN steps has a smoothed value in it, so the
    # line stops where the loss went NaN (it held ~1e33 across 255 NaN steps before)
    first_bad = loss.first_nonfinite()[0]
    chart = store_chart(store, "loss", ViewState(smoothing=0.6), 200)
    smooth_trace = next(t for t in chart.traces if t.style == "ema")
    raw_trace = next(t for t in chart.traces if t.name == "loss")
    assert smooth_trace.name == smoothing.label(0.6)
    span = chart.end - chart.start + 1
    for i, (lo, hi) in enumerate(zip(smooth_trace.lo, smooth_trace.hi, strict=True)):
        bucket_first = chart.start + i * span // 200
        if bucket_first > first_bad and ys[-1] != ys[-1]:  # every step after is NaN
            assert lo is None and hi is None, f"a smoothed point at bucket {i}"
    assert any(raw_trace.bad), "the raw line marks the NaN"
    assert "smooth(0.6) NaN" in chart.legend  # at the end the smoothed loss says NaN too


def test_off_draws_no_smoothed_line_and_the_key_steps_through_the_weights() -> None:
    store = Store()
    store.ingest([{"kind": "step", "step": i, "loss": 1.0 / (i + 1)} for i in range(50)])
    off = store_chart(store, "loss", ViewState(smoothing=0.0), 100)
    assert [t.name for t in off.traces] == ["loss"] and "smooth" not in off.legend
    on = store_chart(store, "loss", ViewState(smoothing=0.9), 100)
    assert [t.name for t in on.traces] == ["loss", "smooth(0.9)"]
    seen, w = [], 0.6
    for _ in range(len(WEIGHTS)):
        w = step_weight(w, 1)
        seen.append(w)
    assert seen == [0.8, 0.9, 0.95, 0.99, 0.0, 0.6]
    assert step_weight(0.6, -1) == 0.0 and step_weight(0.0, -1) == 0.99
    assert step_weight(0.7, 1) == 0.8 and step_weight(0.7, -1) == 0.6  # a --smooth weight


def test_parse_weight_refuses_what_would_not_smooth() -> None:
    assert smoothing.parse_weight("0") == 0.0 and smoothing.parse_weight("0.95") == 0.95
    for bad in ("1", "-0.1", "abc", "nan"):
        with pytest.raises(ValueError, match="--smooth"):
            smoothing.parse_weight(bad)
