"""The columnar store and its min/max decimation, checked against brute-force references."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from dltop.tui.core.store.decimate import BLOCK, NAN, NEGINF, POSINF
from dltop.tui.core.store.runstore import Store
from dltop.tui.core.store.smoothing import smooth

NONFINITE = (math.nan, math.inf, -math.inf)


def _mark(v: float) -> int:
    if v != v:
        return NAN
    if v == math.inf:
        return POSINF
    if v == -math.inf:
        return NEGINF
    return 0


def reference(points: list[tuple[int, float]], start: int, end: int, width: int) -> dict:
    """Buckets computed the obvious way, one point at a time."""
    span = end - start + 1
    lo: list[float | None] = [None] * width
    hi: list[float | None] = [None] * width
    count = [0] * width
    marks = [0] * width
    first: list[float | None] = [None] * width
    last: list[float | None] = [None] * width
    for x, v in points:
        if not start <= x <= end:
            continue
        c = (x - start) * width // span
        count[c] += 1
        if count[c] == 1:
            first[c] = v
        last[c] = v
        if _mark(v):
            marks[c] |= _mark(v)
            continue
        lo[c] = v if lo[c] is None else min(lo[c], v)
        hi[c] = v if hi[c] is None else max(hi[c], v)
    return {"lo": lo, "hi": hi, "count": count, "marks": marks, "first": first, "last": last}


def _steps(
    values: list[float | None], steps: list[int] | None = None, **extra: float
) -> list[dict]:
    out = []
    for i, v in enumerate(values):
        rec = {"kind": "step", "step": steps[i] if steps else i, "t": 100.0 + i, **extra}
        if v is not None:
            rec["loss"] = v
        out.append(rec)
    return out


def _noisy(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    vals = [rng.gauss(0, 1) for _ in range(n)]
    for _ in range(n // 300 + 3):  # spikes and non-finite values at random places
        vals[rng.randrange(n)] = rng.choice([1e6, -1e6, *NONFINITE])
    return vals


def _check(store: Store, name: str, points: list[tuple[int, float]], start: int, end: int, w: int):
    d = store.decimate(name, start, end, w)
    ref = reference(points, start, end, w)
    assert d.count == ref["count"], (start, end, w)
    assert d.marks == ref["marks"], (start, end, w)
    assert d.lo == ref["lo"], (start, end, w)
    assert d.hi == ref["hi"], (start, end, w)
    # the raw first and last values join the lines (NaN compared as NaN)
    assert repr(d.first) == repr(ref["first"]) and repr(d.last) == repr(ref["last"])


def test_step_fields_become_columns_discovered_from_the_data() -> None:
    store = Store()
    store.ingest(
        [
            {"kind": "meta", "v": 1, "run_id": "r"},
            {
                "kind": "step",
                "step": 0,
                "t": 1.0,
                "loss": 2.0,
                "lr": 0.1,
                "note": "warm",
                "lrs": [0.1, 0.01],
            },
            {
                "kind": "step",
                "step": 1,
                "t": 2.0,
                "loss": 1.5,
                "lr": 0.1,
                "acc": 0.5,
                "flag": True,
                "lrs": [0.1, 0.02],
            },
        ]
    )
    names = set(store.names())
    assert {"loss", "lr", "t", "acc", "lrs.0", "lrs.1"} <= names
    assert "note" not in names and "flag" not in names and "kind" not in names
    assert list(store.series("loss").ys) == [2.0, 1.5]
    assert store.series("lrs.1").last() == (1, 0.02)
    assert store.series("acc").last() == (1, 0.5) and len(store.series("acc")) == 1
    assert store.steps == 2 and store.last_step == 1 and store.meta["run_id"] == "r"


def test_missing_is_a_gap_but_nan_is_a_point() -> None:
    store = Store()
    store.ingest(_steps([1.0, None, math.nan, None, 3.0, math.inf]))
    s = store.series("loss")
    assert len(s) == 4  # two steps had no loss: no point there
    assert list(s.xs()) == [0, 2, 4, 5]
    assert s.first_nonfinite()[0] == 2 and math.isnan(s.first_nonfinite()[1])
    d = store.decimate("loss", 0, 5, 6)
    assert d.count == [1, 0, 1, 0, 1, 1]
    assert d.marks == [0, 0, NAN, 0, 0, POSINF]
    assert d.lo == [1.0, None, None, None, 3.0, None]
    assert d.bad == [False, False, True, False, False, True]
    assert not s.shared  # it had holes: it keeps its own steps


@pytest.mark.parametrize("clean", [False, True], ids=["with-nan", "all-finite"])
@pytest.mark.parametrize("n", [1, 5, BLOCK - 1, BLOCK * 3 + 7, 5000])
def test_decimate_matches_reference_at_every_width(n: int, clean: bool) -> None:
    vals = _noisy(n, seed=n)
    if clean:  # the usual series: no NaN or infinity anywhere (decimate's fast path)
        vals = [v if math.isfinite(v) else 1e6 for v in vals]
    store = Store()
    for i in range(0, n, 777):  # several ingests: summaries are built incrementally
        store.ingest(_steps(vals[i : i + 777], list(range(i, min(n, i + 777)))))
    points = list(enumerate(vals))
    assert store.series("loss").shared
    for w in (1, 2, 3, 7, 120, 333, n, n + 5, 3 * n):
        _check(store, "loss", points, 0, n - 1, w)
    rng = random.Random(1)
    for _ in range(20):  # zoomed windows, partly outside the data
        a = rng.randrange(-10, n)
        b = a + rng.randrange(0, n + 10)
        _check(store, "loss", points, a, b, rng.choice((1, 13, 120, 400)))


@pytest.mark.slow
def test_decimate_never_hides_a_spike_or_nan_in_a_million_points() -> None:
    n = 1_000_000
    batch = 50_000
    vals = [1.0] * n
    vals[654_321] = 99.0
    vals[123_457] = math.nan
    store = Store()
    for i in range(0, n, batch):
        store.ingest([{"kind": "step", "step": j, "loss": vals[j]} for j in range(i, i + batch)])
    for w in (1, 80, 120, 1000):
        d = store.decimate("loss", 0, n - 1, w)
        assert max(v for v in d.hi if v is not None) == 99.0
        assert sum(1 for m in d.marks if m & NAN) == 1
        assert sum(d.count) == n


def test_sparse_steps_and_later_holes() -> None:
    rng = random.Random(3)
    steps = sorted(rng.sample(range(100_000), 3000))
    vals = _noisy(3000, seed=4)
    store = Store()
    store.ingest(_steps(vals[:1000], steps[:1000]))
    assert store.series("loss").shared  # present in every step record so far
    recs = _steps(vals[1000:], steps[1000:])
    dropped = set(rng.sample(range(len(recs)), 200))
    for i in dropped:
        del recs[i]["loss"]
    store.ingest(recs)
    assert not store.series("loss").shared
    points = [
        (s, v) for i, (s, v) in enumerate(zip(steps, vals, strict=True)) if i - 1000 not in dropped
    ]
    assert len(store.series("loss")) == len(points)
    for w in (1, 50, 120, 5000):
        _check(store, "loss", points, 0, 99_999, w)
        _check(store, "loss", points, steps[500], steps[2500], w)


def _resumed(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The reference for a log whose steps go backwards: a later record at step s replaces
    every earlier point at steps >= s (a run resumed from a checkpoint)."""
    out: list[tuple[int, float]] = []
    for x, v in points:
        while out and out[-1][0] > x:
            out.pop()
        out.append((x, v))
    return out


@pytest.mark.parametrize("batch", [50, 777, 10_000])
def test_a_resumed_run_replaces_the_records_from_the_resume_step_on(batch: int) -> None:
    vals = _noisy(1200, seed=9)
    # resumed twice from checkpoints, once to before the first step of the log
    steps = [*range(300), *range(150, 600), *range(590, 790)]
    steps = [*steps, *range(-5, 245)]
    points = list(zip(steps, vals, strict=True))
    store = Store()
    recs = []
    for r in _steps(vals, steps):
        recs.append(r)
        if r["step"] % 50 == 49:  # evals and sys samples are cut with the steps they follow
            recs += [{"kind": "eval", "step": r["step"], "loss": 9.0}, {"kind": "sys", "rss": 1.0}]
    for i in range(0, len(recs), batch):
        store.ingest(recs[i : i + batch])
    assert store.resumes == [150, 590, -5]
    kept = _resumed(points)
    loss = store.series("loss")
    assert [(x, repr(v)) for x, v in loss.points()] == [(x, repr(v)) for x, v in kept]
    assert list(store.step_x) == [x for x, _ in kept]
    assert [x for x, _ in store.series("eval.loss").points()] == [-1, 49, 99, 149, 199]
    assert [x for x, _ in store.series("sys.rss").points()] == [-1, 49, 99, 149, 199]
    smoothed = store.smoothed("loss", 0.5)
    assert smoothed is not None and len(smoothed) == len(loss)
    # the smoothed copy is that of the run as it continued, not of the replaced tail
    ref = Store()
    ref.ingest(_steps([v for _, v in kept], [x for x, _ in kept]))
    assert list(map(repr, smoothed.ys)) == list(map(repr, ref.smoothed("loss", 0.5).ys))
    lo, hi = kept[0][0], kept[-1][0]
    for w in (1, 7, 120, 500):
        _check(store, "loss", kept, lo, hi, w)
    assert loss.at_step(100) == (100, dict(kept)[100]) and loss.x_range() == (lo, hi)


def test_after_many_resumes_decimation_still_reads_the_block_summaries(monkeypatch) -> None:
    """Ten resumes in 200 k steps: every chart still decimates from the block summaries,
    touching O(width * BLOCK) raw values, never all of them (the cost of a redraw must not
    grow with the log's history)."""
    import dltop.tui.core.store.decimate as dec
    import dltop.tui.core.store.series as ser

    n, per = 200_000, 20_000
    store = Store()
    step = 0
    for seg in range(n // per):
        step -= 500 if seg else 0
        store.ingest(
            [{"kind": "step", "step": step + i, "loss": 1.0 + (i % 7)} for i in range(per)]
        )
        step += per
    assert len(store.resumes) == n // per - 1
    touched: list[int] = []
    rows: list[int] = []
    real_minmax, real_rows = dec._finite_minmax, ser.decimate_edges

    def counting_minmax(ys, a, b, dirty):  # type: ignore[no-untyped-def]
        touched.append(max(0, b - a))
        return real_minmax(ys, a, b, dirty)

    def counting_rows(*args, **kw):  # type: ignore[no-untyped-def]
        rows.append(1)
        return real_rows(*args, **kw)

    monkeypatch.setattr(dec, "_finite_minmax", counting_minmax)
    monkeypatch.setattr(ser, "decimate_edges", counting_rows)
    lo, hi = store.step_range()
    width = 120
    d = store.decimate("loss", lo, hi, width)
    assert rows == [1], "the sorted, summarised path"
    assert sum(d.count) == len(store.series("loss")) == n - 500 * (n // per - 1)
    assert 0 < sum(touched) <= width * 2 * BLOCK < len(store.series("loss")) // 4


def test_versions_and_changed() -> None:
    store = Store()
    v0 = store.version
    v1 = store.ingest(_steps([1.0, 2.0], grad_norm=1.0))
    assert v1 == v0 + 1 and set(store.changed(v0)) >= {"loss", "grad_norm", "t"}
    v2 = store.ingest([{"kind": "eval", "step": 1, "loss": 0.5}])
    assert store.changed(v1) == ["eval.loss"]
    v3 = store.ingest([{"kind": "event", "type": "note", "text": "hi"}])
    assert store.changed(v2) == []
    assert store.ingest([]) == v3  # nothing new, no bump
    d = store.decimate("loss", 0, 1, 2)
    assert d.version == v1


def test_eval_sys_events_layers_heartbeat() -> None:
    store = Store()
    store.ingest(
        [
            {
                "kind": "sys",
                "t": 1.0,
                "rss": 1e9,
                "gpus": [{"index": 0, "util": 50.0, "mem_used": 2e9}],
            },
            {"kind": "step", "step": 10, "t": 2.0, "loss": 1.0},
            {"kind": "sys", "t": 3.0, "rss": 1.1e9, "cpu": 90.0},
            {"kind": "eval", "step": 10, "t": 3.5, "loss": 1.2, "acc": math.nan},
            {"kind": "layers", "step": 10, "norms": {"fc": 1.0}},
            {"kind": "event", "type": "exception", "message": "boom"},
            {"kind": "heartbeat", "t": 4.0},
            {"kind": "mystery", "x": 1},
        ]
    )
    assert store.series("sys.rss").last() == (10, 1.1e9)
    assert store.series("sys.gpus.0.util").last() == (10, 50.0)  # before any step: that step
    assert store.series("eval.loss").last() == (10, 1.2)
    assert len(store.series("eval.acc").nonfinite) == 1
    assert store.layers["norms"] == {"fc": 1.0}
    assert [e["type"] for e in store.events] == ["exception"]
    assert store.kinds["heartbeat"] == 1 and store.kinds["mystery"] == 1


def test_the_smoothed_loss_breaks_at_a_nonfinite_value_and_starts_again_debiased() -> None:
    store = Store()
    store.ingest(_steps([2.0, 4.0, math.nan, 4.0]))
    smoothed = store.smoothed("loss", 0.5)
    assert smoothed is not None and smoothed.ys[0] == 2.0  # debiased: not dragged to 0
    assert smoothed.ys[1] == pytest.approx((0.5 * 2.0 + 4.0) / 1.5)
    assert math.isnan(smoothed.ys[2]) and smoothed.ys[3] == 4.0  # nothing carried over
    store.ingest(_steps([math.inf], [4]))
    assert store.smoothed("loss", 0.5) is smoothed and math.isnan(smoothed.ys[4])
    assert store.smoothed("loss", 0.0) is None and store.smoothed("nope", 0.6) is None


@pytest.mark.slow
def test_store_memory_stays_bounded_for_a_million_steps() -> None:
    """RSS growth of 1 M steps x 10 metrics, measured in a fresh interpreter."""
    code = textwrap.dedent(
        """
        import json, resource
        from dltop.tui.core.store.runstore import Store
        def rss():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        store = Store()
        keys = ["loss", "grad_norm", "lr", "data_time", "step_time", "compute_time",
                "samples_per_s", "mem_allocated", "mem_reserved"]
        before = rss()
        for i in range(0, 1_000_000, 4096):
            store.ingest([dict({"kind": "step", "step": j, "t": 1e9 + j},
                               **{k: j * 0.5 + n for n, k in enumerate(keys)})
                          for j in range(i, min(i + 4096, 1_000_000))])
        print(json.dumps({"delta_mb": rss() - before, "arrays_mb": store.nbytes / 2**20,
                          "steps": store.steps, "series": len(store.names())}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["steps"] == 1_000_000 and r["series"] == 10  # 10 metrics
    assert r["arrays_mb"] < 110
    assert r["delta_mb"] < 150, r


def test_a_log_naming_a_new_field_every_step_keeps_a_bounded_number_of_series() -> None:
    """A writer that names a field after its step (``sample_<i>``), a list of 5 000 floats,
    a sys record with a dict of 5 000 keys: past MAX_SERIES new names are refused and
    counted, the fields already charted keep every value, and the work per batch stays
    that of the fields kept (20 k steps of this shape took 7 s to ingest before the
    limit, 0.6 s with it, on the development machine)."""
    from dltop.tui.core.store.serieslimit import MAX_SERIES

    store = Store()
    n = 3 * MAX_SERIES
    recs: list[dict[str, Any]] = [
        {"kind": "step", "step": i, "t": float(i), "loss": 1.0 / (i + 1), f"sample_{i}": 1.0}
        for i in range(n)
    ]
    for i in range(0, n, 500):
        store.ingest(recs[i : i + 500])
    assert len(store.names()) == MAX_SERIES
    loss = store.series("loss")
    assert loss is not None and len(loss) == n, "an admitted series keeps every value"
    assert store.series("t") is not None
    # t and loss, then sample_ fields until the limit; the rest refused, each once
    assert store.budget.refused == n - (MAX_SERIES - 2) and not store.budget.more
    note = store.budget.note()
    assert note == f"{n - (MAX_SERIES - 2)} fields not charted (a run keeps {MAX_SERIES} series)"
    store.ingest([{"kind": "step", "step": n, "loss": 0.4, "sample_0": 2.0, "sample_9999": 1.0}])
    assert len(loss) == n + 1 and store.budget.refused == n - (MAX_SERIES - 2) + 1
    store.ingest([{"kind": "step", "step": n + 1, "loss": 0.3, "wide": list(range(5000))}])
    assert store.budget.refused == n - (MAX_SERIES - 2) + 2  # a list: one field
    store.ingest([{"kind": "sys", "t": 1.0, "d": {f"k{j}": 1.0 for j in range(5000)}}])
    assert store.budget.more and store.budget.note().startswith("4096+ fields not charted")
    assert len(store.names()) == MAX_SERIES and len(loss) == n + 2


def test_refused_names_are_counted_up_to_a_bound_then_said_with_a_plus() -> None:
    from dltop.tui.core.store.serieslimit import SeriesBudget

    b = SeriesBudget(limit=2)
    assert b.note() == "" and b.admits(1) and not b.admits(2)
    for i in range(5000):
        b.refuse(f"x{i}")
    assert b.refused == 4096 and b.more
    assert b.note() == "4096+ fields not charted (a run keeps 2 series)"


def test_the_header_says_how_many_fields_are_not_charted() -> None:
    from dltop.tui.core.present import view_model as vm
    from dltop.tui.core.store.run import RunModel
    from dltop.tui.core.store.serieslimit import MAX_SERIES

    model = RunModel("wide.jsonl")
    model.ingest([{"kind": "step", "step": i, f"m{i}": 1.0} for i in range(MAX_SERIES + 50)])
    with model.lock:
        info = vm.header_info(model, 0.0, vm.ViewState(), follow=False)
    assert f"fields not charted (a run keeps {MAX_SERIES} series)" in info.mode


def test_the_dashboard_series_are_charted_whatever_fills_the_limit_first() -> None:
    """5 000 fields in the first batch (set order is hash order) and the limit full before
    the first sys sample: the loss, its EMA, the timings, the memory and the GPU still
    get their series, and every series a panel draws is one the store always admits."""
    from dltop.tui.core.present.panels import CPU_MEMORY, PANELS
    from dltop.tui.core.store.serieslimit import MAX_SERIES, RESERVED

    drawn = {s.metric for p in (*PANELS, CPU_MEMORY) for s in p.series}
    assert drawn <= RESERVED
    store = Store()
    wide = {f"layer{j}.grad": 1.0 for j in range(5000)}
    base = {"loss": 1.0, "grad_norm": 1.0, "lr": 0.1, "data_time": 0.01, "step_time": 0.1,
            "compute_time": 0.09, "samples_per_s": 320.0, "mem_allocated": 1e9}  # fmt: skip
    store.ingest([{"kind": "step", "step": i, **base, **wide} for i in range(3)])
    store.ingest([{"kind": "sys", "t": 1.0, "rss": 1e9, "gpus": [{"index": 0, "util": 9.0}]}])
    store.ingest([{"kind": "eval", "step": 2, "loss": 0.9}])
    for name in (*base, "sys.rss", "sys.gpus.0.util", "eval.loss"):
        assert store.series(name) is not None, name
    assert len(store.names()) <= MAX_SERIES + len(RESERVED)


def test_a_refused_field_costs_no_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the limit, a new field's column is never read: a batch of 500 records each
    naming a new field reads the columns of the fields kept, not 500 more, and a list of
    5 000 numbers past the limit builds no column per element (the work per batch is
    that of the fields kept, whatever the log names)."""
    from dltop.tui.core.store import runstore as store_module
    from dltop.tui.core.store.serieslimit import MAX_SERIES

    store = Store()
    store.ingest(
        [{"kind": "step", "step": 0, "loss": 1.0, **{f"m{j}": 1.0 for j in range(MAX_SERIES)}}]
    )
    assert len(store.names()) >= MAX_SERIES
    refused = store.budget.refused
    dense, sparse = [], []
    real_dense, real_sparse = store_module.dense, Store._sparse

    def counting_dense(col: list[Any]) -> Any:
        dense.append(1)
        return real_dense(col)

    def counting_sparse(self: Store, *args: Any) -> None:
        sparse.append(1)
        real_sparse(self, *args)

    parts: list[Any] = []  # sub-columns built out of list and dict fields
    real_part_of = store_module.part_of

    def counting_part_of(col: list[Any], at: Any) -> list[Any]:
        if at is not None:
            parts.append(at)
        return real_part_of(col, at)

    monkeypatch.setattr(store_module, "dense", counting_dense)
    monkeypatch.setattr(Store, "_sparse", counting_sparse)
    monkeypatch.setattr(store_module, "part_of", counting_part_of)
    store.ingest([{"kind": "step", "step": i, "loss": 0.5, f"new{i}": 1.0} for i in range(1, 501)])
    assert len(dense) == 1  # the loss column only
    store.ingest([{"kind": "step", "step": 501, "loss": 0.4, "wide": list(range(5000))}])
    assert len(sparse) == 0 and store.series("wide.0") is None and not parts
    assert store.budget.refused == refused + 501
    # a list that arrives with room for 3 of its elements: 3 columns, then the rest refused
    roomy = Store()
    roomy.ingest([{"kind": "step", "step": 0, **{f"m{j}": 1.0 for j in range(MAX_SERIES - 3)}}])
    sparse.clear()
    parts.clear()
    roomy.ingest([{"kind": "step", "step": 1, "wide": list(range(5000))}])
    assert [roomy.series(f"wide.{i}") is not None for i in range(4)] == [True] * 3 + [False]
    assert len(sparse) == 3 and parts == [0, 1, 2]
    # a dict field charted while there was room, later with 5 000 keys: its one series
    # goes on, and no column is read for the keys refused
    keyed = Store()
    keyed.ingest([{"kind": "step", "step": 0, **{f"m{j}": 1.0 for j in range(MAX_SERIES - 1)}}])
    keyed.ingest([{"kind": "step", "step": 1, "per": {"k0": 1.0}}])
    sparse.clear()
    parts.clear()
    keyed.ingest([{"kind": "step", "step": 2, "per": {f"k{j}": 1.0 for j in range(5000)}}])
    per = keyed.series("per.k0")
    assert per is not None and len(per) == 2 and keyed.series("per.k1") is None
    assert len(sparse) == 1 and parts == ["k0"]  # no sub-column for the 4 999 refused


@pytest.mark.parametrize("batch", [1, 3, 64, 1000])
def test_smoothing_is_the_same_floats_whatever_the_batches_and_gaps(batch: int) -> None:
    rng = random.Random(batch)
    values = [rng.lognormvariate(0, 1) for _ in range(900)]
    for i in rng.sample(range(900), 40):  # NaN and infinities, some at a batch's start
        values[i] = rng.choice([math.nan, math.inf, -math.inf])
    values[:5] = [math.nan, math.inf, math.nan, math.nan, math.nan]  # no finite value yet
    values[850:880] = [1e308, -1e308] * 15  # finite, but the average itself may overflow
    steps = [3 * i + (i % 2) for i in range(900)]  # uneven gaps: the weight is per step
    store = Store()
    for i in range(0, len(values), batch):  # extended as the run grows, drawn in between
        store.ingest(_steps(values[i : i + batch], steps[i : i + batch]))
        store.smoothed("loss", 0.9)
    got = list(map(repr, store.smoothed("loss", 0.9).ys))
    assert got == list(map(repr, smooth(steps, values, 0.9)))


def test_a_list_field_refused_whole_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that fills the limit as it goes: the list fields that got no series at all
    are refused like any other new name from then on, so a later batch reads the column of
    the one that got a series, not 300 (the work per batch stays that of the fields kept)."""
    from dltop.tui.core.store import runstore as store_module
    from dltop.tui.core.store.serieslimit import MAX_SERIES

    store = Store()
    store.ingest([{"kind": "step", "step": 0, **{f"m{j}": 1.0 for j in range(MAX_SERIES - 1)}}])
    lists = {f"l{j}": [1.0, 2.0] for j in range(300)}
    store.ingest([{"kind": "step", "step": 1, **lists}])
    charted = [j for j in range(300) if store.series(f"l{j}.0") is not None]
    assert len(charted) == 1 and store.series(f"l{charted[0]}.1") is None
    reads: list[int] = []
    real_dense = store_module.dense

    def counting_dense(col: list[Any]) -> Any:
        reads.append(1)
        return real_dense(col)

    monkeypatch.setattr(store_module, "dense", counting_dense)
    store.ingest([{"kind": "step", "step": 2, **lists}])
    assert len(reads) == 1
    assert [x for x, _ in store.series(f"l{charted[0]}.0").points()] == [1, 2]
