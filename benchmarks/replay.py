"""Replay of a huge log: time to a drawn dashboard and peak RSS, next to the parse floors.

    .venv/bin/python benchmarks/replay.py [--steps 1000000] [--only a,b] [--keep DIR]
                                          [--rate 10000] [--seconds 10] [--quick]
                                          [--repeat N]

One run reports everything the speed targets are judged by, each figure next to the
anchors measured in the same run on the same file: the time to a fully drawn dashboard
and its peak RSS (``drawn``) against the read floor (``read``) and a plain orjson line
loop (``orjson``), and the event loop's lag while a writer appends 10 k records/s
(``lag``). ``--quick`` is a smoke run (20 k steps, 2 s of appends): same code paths,
figures not comparable with the targets. ``--repeat N`` runs every variant N times, in
rounds, and keeps each one's fastest (the ratios' anchor included; ``lag`` keeps its worst
p99): on a noisy machine one run's ratio moves by 1x either way.

Generates a realistic log (1 M steps ~ 250 MB: meta, step records with 11 fields, a sys
sample every 100 steps, an eval every 1000, heartbeats, an exit) into a temp dir, then
measures each variant in its OWN subprocess, so that peak RSS (``ru_maxrss``) belongs to
that variant alone and no variant warms the page cache for the next more than the first
(the log is read once before measuring). Variants, cheapest first:

- ``read``        the floor: read the file in 4 MB chunks
- ``newlines``    newline index floor: mmap + ``bytes.find`` loop into ``array('q')`` (its
                  RSS shows why the viewer does not mmap the whole log: the mapped pages count)
- ``orjson``      a plain line-by-line ``orjson.loads`` (skipped when orjson is absent)
- ``msgspec``     a plain line-by-line msgspec decode to dicts
- ``decoder``     the schema's ``LineDecoder`` over the source's chunks (what every reader uses)
- ``store``       decoder + ``Store.ingest`` (columns, block summaries, EMA), no rules
- ``check``       ``dltop check``'s work: decode + every rule + the run status
- ``full``        ``FileSource`` (tail-first off) -> ``RunModel.ingest`` (store + rules
                  engine) -> a dashboard's worth of series decimated at 120 columns
- ``tailfirst``   the viewer's path: tail preview -> dashboard decimated ("ready"), the
                  off-lock chart backfill adopted ("history"), then the rules brought
                  through the whole run ("complete"): with a second CPU, by a child
                  process started with the chart backfill (tui/core/sources/rules_worker.py)
- ``tailfirst1``  the same with the rules on the reader thread after the charts (no child)
- ``overlay``     one dashboard redraw's core work with 8 runs overlaid (``dltop A ... H``,
                  200 k steps each: every panel's signature and its line per run) next
                  to the same on one of those runs
- ``resumed``     one dashboard redraw's core work (every panel's signature and chart) on
                  a run whose steps went backwards 10 times (a resumed training appending
                  to its log), next to the same on a run that never went back
- ``drawn``       the real app (``DltopApp``, headless 120x40, replay): seconds until every
                  visible panel has drawn data ("ready") and until the whole run is loaded,
                  diagnosed and drawn again ("complete"); peak RSS of that process
                  (``benchmarks/ui_lag.py``)
- ``lag``         the app following a log while a writer subprocess appends ``--rate``
                  records/s for ``--seconds``: lateness of a 10 ms sleep on its event loop

Ratios are printed against ``read`` (and ``drawn`` also against ``orjson``), measured in
the same run. Each variant takes the log path and returns a dict of figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

CHUNK = 4 << 20  # the read floor's chunk; the parse variants use the viewer's own size
WIDTH = 120
# what the dashboard draws: one chart per name (the app's panels)
DASHBOARD = (
    "loss",
    "eval.loss",
    "grad_norm",
    "lr",
    "data_time",
    "compute_time",
    "step_time",
    "mem_allocated",
    "mem_reserved",
    "samples_per_s",
    "sys.rss",
    "sys.gpus.0.util",
)


def generate_log(path: str, steps: int, seed: int = 0) -> int:
    """Write a synthetic run of ``steps`` steps; returns its size in bytes."""
    from dltop.probe.encoding import encode_record

    rng = random.Random(seed)
    t = 1_700_000_000.0
    out: list[bytes] = [
        encode_record(
            {"kind": "meta", "v": 1, "run_id": "bench", "host": "bench", "pid": 1, "t": t}
        )
    ]
    with open(path, "wb") as f:
        for i in range(steps):
            data = 0.002 + rng.random() * 0.001
            compute = 0.030 + rng.random() * 0.004
            t += data + compute
            loss = 2.5 * math.exp(-i / (steps / 3)) + 0.3 + rng.random() * 0.05
            if i == steps // 2:
                loss = 40.0  # a one-step spike the decimation must keep
            out.append(
                encode_record(
                    {
                        "kind": "step",
                        "step": i,
                        "t": round(t, 6),
                        "loss": loss,
                        "grad_norm": 1.0 + rng.random(),
                        "lr": 3e-4 * min(1.0, (i + 1) / 2000),
                        "data_time": round(data, 6),
                        "step_time": round(data + compute, 6),
                        "compute_time": round(compute, 6),
                        "samples_per_s": round(64 / (data + compute), 3),
                        "mem_allocated": 1_200_000_000 + (i % 1000) * 1000,
                        "mem_reserved": 2_000_000_000,
                    }
                )
            )
            if i % 100 == 0:
                out.append(
                    encode_record(
                        {
                            "kind": "sys",
                            "t": t,
                            "rss": 3.1e9,
                            "cpu": 99.0,
                            "gpus": [{"index": 0, "util": 97.0, "mem_used": 5e9}],
                        }
                    )
                )
                out.append(encode_record({"kind": "heartbeat", "t": t}))
            if i % 1000 == 999:
                out.append(encode_record({"kind": "eval", "step": i, "t": t, "loss": loss + 0.1}))
            if len(out) >= 10_000:
                f.write(b"".join(out))
                out.clear()
        out.append(encode_record({"kind": "event", "type": "exit", "status": "ok", "t": t}))
        f.write(b"".join(out))
    return os.path.getsize(path)


# -- variants (each runs in a fresh subprocess) ---------------------------------------------
def v_read(path: str) -> dict[str, Any]:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            n += len(chunk)
    return {"bytes": n}


def v_newlines(path: str) -> dict[str, Any]:
    import mmap
    from array import array

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        offsets = array("q")
        find = mm.find
        append = offsets.append
        i = find(b"\n")
        while i >= 0:
            append(i)
            i = find(b"\n", i + 1)
    return {"lines": len(offsets)}


def v_orjson(path: str) -> dict[str, Any]:
    try:
        import orjson
    except ImportError:
        return {"skipped": "orjson not installed"}
    n = 0
    with open(path, "rb") as f:
        for line in f:
            orjson.loads(line)
            n += 1
    return {"lines": n}


def v_msgspec(path: str) -> dict[str, Any]:
    import msgspec

    decode = msgspec.json.Decoder().decode
    n = 0
    with open(path, "rb") as f:
        for line in f:
            decode(line)
            n += 1
    return {"lines": n}


def v_decoder(path: str) -> dict[str, Any]:
    from dltop.probe.decoding import LineDecoder
    from dltop.tui.core.sources.filesource import CHUNK as SOURCE_CHUNK

    dec = LineDecoder()
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(SOURCE_CHUNK):
            n += len(dec.feed(chunk))
    return {"records": n + len(dec.finish())}


def v_store(path: str) -> dict[str, Any]:
    from dltop.probe.decoding import LineDecoder
    from dltop.tui.core.sources.filesource import CHUNK as SOURCE_CHUNK
    from dltop.tui.core.store.runstore import Store

    dec = LineDecoder()
    store = Store()
    with open(path, "rb") as f:
        while chunk := f.read(SOURCE_CHUNK):
            recs = dec.feed(chunk)
            for i in range(0, len(recs), 4096):
                store.ingest(recs[i : i + 4096])
    return {"steps": store.steps, "store_mb": round(store.nbytes / 2**20, 1)}


def decimate_dashboard(model: Any) -> dict[str, Any]:
    """Decimate every dashboard series over the whole run at WIDTH columns (UI thread work)."""
    with model.lock:
        store = model.store
        rng = store.step_range() or (0, 0)
        t0 = time.perf_counter()
        charts = [store.decimate(name, rng[0], rng[1], WIDTH) for name in DASHBOARD]
        dt = time.perf_counter() - t0
        # the smoothed loss: one pass over the run the first time (or at a new weight),
        # then only the points added since
        t1 = time.perf_counter()
        smoothed = store.smoothed("loss", 0.6)
        smooth_first = time.perf_counter() - t1
        if smoothed is not None:
            charts.append(smoothed.decimate(rng[0], rng[1], WIDTH))
    spike = max((v for v in charts[0].hi if v is not None), default=None)
    return {
        "decimate_ms_per_chart": round(dt * 1000 / len(DASHBOARD), 2),
        "smooth_first_ms": round(smooth_first * 1000, 1),
        "charts_with_points": sum(1 for c in charts if c.points),
        "loss_max": spike,
        "window": list(rng),
    }


def v_full(path: str) -> dict[str, Any]:
    from dltop.tui.core.sources.filesource import FileSource
    from dltop.tui.core.store.run import RunModel

    model = RunModel("bench")
    FileSource(path, model, follow=False, tail_first=None).run()
    out = decimate_dashboard(model)
    out.update(records=model.records, engine=model.engine is not None, alerts=len(model.alerts()))
    if model.engine_error:
        out["engine_error"] = model.engine_error
    out["store_mb"] = round(model.store.nbytes / 2**20, 1)
    return out


def v_check(path: str) -> dict[str, Any]:
    """`dltop check`'s whole work on one log: decode, every rule, the run status."""
    from dltop.tui.check_file import check_file
    from dltop.tui.core.rules.config import Config

    r = check_file(path, Config())
    return {"steps": r.engine.steps, "alerts": len(r.engine.alerts()), "status": r.state.status}


def v_tailfirst(path: str, rules_child: bool = True) -> dict[str, Any]:
    from dltop.tui.core.sources.filesource import FileSource
    from dltop.tui.core.store.run import RunModel

    t0 = time.perf_counter()
    model = RunModel("bench")
    ready: dict[str, Any] = {}

    calls = [0]

    def on_update(n: int) -> None:
        calls[0] += 1
        if ready and "history_s" not in ready and model.loading is None:
            ready["history_s"] = round(time.perf_counter() - t0, 3)  # whole run charted
        if not ready and model.records:
            ready.update(decimate_dashboard(model))
            ready["ready_s"] = round(time.perf_counter() - t0, 3)
            ready["ready_rss_mb"] = _peak_rss_mb()
            ready["preview_steps"] = model.store.steps

    src = FileSource(path, model, on_update, follow=False)
    if not rules_child:
        src.rules_worker_min = None
    src.run()
    full = decimate_dashboard(model)
    return {
        **ready,
        "complete_s": round(time.perf_counter() - t0, 3),
        "updates": calls[0],
        "steps": model.store.steps,
        "alerts": len(model.alerts()),
        "loss_max_full": full["loss_max"],
        **({"engine_error": model.engine_error} if model.engine_error else {}),
    }


def v_tailfirst1(path: str) -> dict[str, Any]:
    return v_tailfirst(path, rules_child=False)


def resumed_records(steps: int, resumes: int, back: int = 500) -> list[dict[str, Any]]:
    """A run of ``steps`` step records (plus sys/eval) that goes back ``back`` steps
    ``resumes`` times, as a training resumed from checkpoints writes it."""
    rng = random.Random(1)
    out: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "run_id": "r", "t": 0.0}]
    per = steps // (resumes + 1)
    step, t = 0, 0.0
    for seg in range(resumes + 1):
        step -= back if seg else 0
        for _ in range(per):
            t += 0.03
            out.append(
                {
                    "kind": "step",
                    "step": step,
                    "t": t,
                    "loss": 2.0 + rng.random(),
                    "grad_norm": 1 + rng.random(),
                    "lr": 3e-4,
                    "data_time": 0.002,
                    "step_time": 0.03,
                    "compute_time": 0.028,
                    "samples_per_s": 2000.0,
                    "mem_allocated": 1.2e9,
                    "mem_reserved": 2e9,
                }  # fmt: skip
            )
            if step % 100 == 0:
                out.append(
                    {"kind": "sys", "t": t, "rss": 3e9, "gpus": [{"index": 0, "util": 97.0}]}
                )
            if step % 1000 == 999:
                out.append({"kind": "eval", "step": step, "t": t, "loss": 1.0})
            step += 1
    return out


def v_resumed(path: str) -> dict[str, Any]:
    """A redraw tick's core work on a resumed run vs a straight one (same size)."""
    from dltop.tui.core.present import view_model as vm

    steps = min(200_000, max(10_000, _steps_of(path)))
    out: dict[str, Any] = {"steps": steps}
    state = vm.ViewState()
    for resumes in (0, 10):
        model = _charted(resumed_records(steps, resumes))
        out[f"tick_ms_{resumes}_resumes"] = _best_ms(lambda m=model: _tick(m, state), [model])
    out["ratio"] = round(out["tick_ms_10_resumes"] / out["tick_ms_0_resumes"], 2)
    return out


def v_overlay(path: str) -> dict[str, Any]:
    """One redraw's core work with 8 runs overlaid (each its own store, like the viewer's
    ``dltop A B ... H``) vs the same on one of them; ``--steps`` capped at 200 k per run."""
    from dltop.tui.core.present import view_model as vm
    from dltop.tui.core.present.overlay import overlay_chart
    from dltop.tui.core.present.rankjob import job_signature
    from dltop.tui.core.ranks.jobs import overlay_runs

    steps = min(200_000, max(10_000, _steps_of(path)))
    recs = resumed_records(steps, 0)
    models = [_charted(recs) for _ in range(8)]
    runs = overlay_runs([f"run{i}.jsonl" for i in range(8)], models)
    state = vm.ViewState()

    def tick() -> None:
        for p in vm.PANELS:
            job_signature(runs, p.key, state)
            overlay_chart(runs, p.key, state, 2 * WIDTH)

    one = _best_ms(lambda: _tick(models[0], state), models)
    eight = _best_ms(tick, models)
    return {
        "steps_per_run": steps,
        "tick_ms_1_run": one,
        "tick_ms_8_runs": eight,
        "ratio": round(eight / one, 2),
        "tick_ms_8_runs_unchanged": _best_ms(tick),
    }


def _charted(records: list[dict[str, Any]]) -> Any:
    """A RunModel whose store holds ``records`` (no rules: the store is what charts read)."""
    from dltop.tui.core.store.run import RunModel

    model = RunModel("bench")
    model.engine = None
    for i in range(0, len(records), 4096):
        model.store.ingest(records[i : i + 4096])
    return model


def _best_ms(fn: Callable[[], None], cold: list[Any] | None = None) -> float:
    """Best of 5 runs of ``fn`` in ms after a warm-up; ``cold``: the models whose cached
    decimations are dropped before each run (untimed), as after new records in each."""
    fn()
    best = math.inf
    for _ in range(5):
        if cold:
            _drop_cached(cold)
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 2)


def _drop_cached(models: list[Any]) -> None:
    """As after new records in every series: no decimation cached (a live run's redraw)."""
    for m in models:
        for name in m.store.names():
            series = m.store.series(name)
            if series is not None:
                series._cache = (-1, {})


def _tick(model: Any, state: Any) -> None:
    """What a redraw asks of the core: every panel's signature, then its chart."""
    from dltop.tui.core.present import view_model as vm

    with model.lock:
        for p in vm.PANELS:
            vm.panel_signature(model, p.key, state)
            vm.panel_chart(model, p.key, state, 2 * WIDTH)


def _steps_of(path: str) -> int:
    name = os.path.basename(path)
    try:
        return int(name.split("-")[1].split(".")[0])
    except (IndexError, ValueError):
        return 200_000


def v_drawn(path: str) -> dict[str, Any]:
    import ui_lag  # the app's side (Textual): imported only in this child

    return ui_lag.v_drawn(path)


def v_lag(path: str) -> dict[str, Any]:
    import ui_lag

    out = ui_lag.v_lag(path, float(os.environ["BENCH_RATE"]), float(os.environ["BENCH_SECONDS"]))
    out["append_s"] = out.pop("seconds")  # "seconds" is the child's wall time
    return out


VARIANTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "read": v_read,
    "newlines": v_newlines,
    "orjson": v_orjson,
    "msgspec": v_msgspec,
    "decoder": v_decoder,
    "store": v_store,
    "check": v_check,
    "full": v_full,
    "tailfirst": v_tailfirst,
    "tailfirst1": v_tailfirst1,
    "resumed": v_resumed,
    "overlay": v_overlay,
    "drawn": v_drawn,
    "lag": v_lag,
}


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_variant(name: str, path: str) -> dict[str, Any]:
    """Child process body: import cost excluded from the timing, included in the RSS."""
    fn = VARIANTS[name]
    import dltop.tui.core.store.run  # noqa: F401
    import msgspec  # noqa: F401 - every variant but `read` needs it; load it before timing

    if name in ("drawn", "lag"):  # Textual and the app load before the clock starts
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import dltop.tui.app.app  # noqa: F401
        import ui_lag  # noqa: F401

    base = _peak_rss_mb()
    t0 = time.perf_counter()
    out = fn(path)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["peak_rss_mb"] = _peak_rss_mb()
    out["baseline_rss_mb"] = base
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if kids:  # a child the variant started (the rules child): its own peak, apart
        out["child_peak_rss_mb"] = round(kids / 1024, 1)
    return out


def measure(name: str, path: str, rate: float = 10_000, seconds: float = 10.0) -> dict[str, Any]:
    """Run one variant in a fresh interpreter and return its figures."""
    env = {**os.environ, "BENCH_RATE": str(rate), "BENCH_SECONDS": str(seconds)}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name, "--log", path],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(results: dict[str, dict[str, Any]]) -> None:
    anchor = results.get("read", {}).get("seconds")
    print(f"{'variant':<11} {'seconds':>8} {'x read':>7} {'peak RSS MB':>12}  details")
    for name, r in results.items():
        if name in ("drawn", "lag") and "error" not in r:
            continue  # their own lines below
        if "error" in r or "skipped" in r:
            print(f"{name:<11} {r.get('error') or r.get('skipped')}")
            continue
        ratio = f"{r['seconds'] / anchor:.1f}" if anchor else "-"
        details = {
            k: v for k, v in r.items() if k not in ("seconds", "peak_rss_mb", "baseline_rss_mb")
        }
        print(f"{name:<11} {r['seconds']:>8.3f} {ratio:>7} {r['peak_rss_mb']:>12.1f}  {details}")
    for name in ("tailfirst", "tailfirst1"):
        tf = results.get(name, {})
        if "ready_s" in tf:
            print(
                f"\n{name}: dashboard data ready {tf['ready_s']:.2f} s (<= 2 s), "
                f"peak RSS of the core {tf['peak_rss_mb']:.0f} MB (whole viewer <= 300 MB); "
                f"whole history charted after {tf.get('history_s', float('nan')):.1f} s, "
                f"rules through the whole run after {tf['complete_s']:.1f} s"
            )
    report_app(results)
    if "decoder" in results and "msgspec" in results and "seconds" in results["decoder"]:
        plain = results["msgspec"]["seconds"]
        print(
            f"LineDecoder / plain msgspec line loop: {results['decoder']['seconds'] / plain:.2f}x"
        )
    if "msgspec" in results and "seconds" in results["msgspec"]:
        plain = results["msgspec"]["seconds"]
        for name, target, what in (
            ("check", 3, "dltop check end to end"),
            ("full", 5, "the viewer's whole-run diagnosis (store + rules, one thread)"),
            ("tailfirst", 5, "the viewer opening the log, until its rules are through"),
            ("tailfirst1", 5, "the same with no rules child"),
        ):
            r = results.get(name, {})
            took = r.get("complete_s", r.get("seconds")) if name.startswith("tail") else (
                r.get("seconds"))  # fmt: skip
            if took is not None and "error" not in r:
                print(f"{what} / msgspec decode: {took / plain:.1f}x (target <= {target}x)")


def report_app(results: dict[str, dict[str, Any]]) -> None:
    """The app's figures next to the floors of the same run."""
    read = results.get("read", {}).get("seconds")
    orj = results.get("orjson", {}).get("seconds")
    d = results.get("drawn", {})
    if "ready_s" in d:
        vs = [f"{d['ready_s'] / read:.1f}x read" if read else ""]
        if orj:
            vs.append(f"{d['ready_s'] / orj:.2f}x orjson lines")
        full = d.get("complete_s", float("nan"))
        print(
            f"\ndrawn: dashboard fully drawn after {d['ready_s']:.2f} s ({', '.join(vs)}; "
            f"{d.get('ready_steps')} steps shown first), whole run loaded, diagnosed and "
            f"drawn after {full:.2f} s"
            + (f" ({full / orj:.2f}x orjson lines)" if orj else "")
            + f"; peak RSS {d['peak_rss_mb']:.0f} MB (target: <= 2 s, <= 300 MB); "
            f"event-loop lag while loading p99 {d['load_lag_p99_ms']:.0f} ms"
        )
    elif "drawn" in results:
        print(f"\ndrawn: no figures ({d})")
    lag = results.get("lag", {})
    if "lag_p99_ms" in lag:
        print(
            f"lag: while a writer appends {lag['rate']:.0f} records/s for {lag['append_s']:.0f} s, "
            f"event-loop lag p50 {lag['lag_p50_ms']:.1f} ms, p99 {lag['lag_p99_ms']:.1f} ms, "
            f"max {lag['lag_max_ms']:.1f} ms (target p99 <= 50 ms); "
            f"{lag['records_seen_at_end']}/{lag['records_written']} records seen at the end, "
            f"{lag['redraws']} redraws (p50 {lag['redraw_p50_ms']:.1f} ms)"
        )
    elif "lag" in results:
        print(f"lag: no figures ({lag})")
    ov = results.get("overlay", {})
    if "ratio" in ov:
        print(
            f"overlay: a redraw's core work with 8 runs x {ov['steps_per_run']} steps overlaid "
            f"{ov['tick_ms_8_runs']:.1f} ms vs one run {ov['tick_ms_1_run']:.1f} ms "
            f"({ov['ratio']:.2f}x) after new records in every run; "
            f"{ov['tick_ms_8_runs_unchanged']:.1f} ms when no run changed (decimations cached)"
        )
    rs = results.get("resumed", {})
    if "ratio" in rs:
        print(
            f"resumed: a redraw's core work on {rs['steps']} steps, 10 resumes "
            f"{rs['tick_ms_10_resumes']:.1f} ms vs none {rs['tick_ms_0_resumes']:.1f} ms "
            f"({rs['ratio']:.2f}x)"
        )


def _best(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The round a variant reports: its fastest; for ``lag``, whose wall time is the fixed
    appending time, the round with the worst p99 (a target is not met by picking a calm
    spell of the machine)."""
    if name == "lag":
        return max(runs, key=lambda x: x.get("lag_p99_ms", -math.inf))
    return min(runs, key=lambda x: x.get("seconds", math.inf))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--only", default="", help="comma-separated variants (default: all)")
    ap.add_argument("--keep", default="", help="write/reuse the log in this directory")
    ap.add_argument("--rate", type=float, default=10_000.0, help="lag: records/s appended")
    ap.add_argument("--seconds", type=float, default=10.0, help="lag: seconds of appending")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 k steps, 2 s of lag")
    ap.add_argument(
        "--repeat", type=int, default=1, help="rounds of every variant; each keeps its fastest"
    )
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--log", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_variant(args.child, args.log)))
        return 0
    if args.quick:
        args.steps = min(args.steps, 20_000)
        args.seconds = min(args.seconds, 2.0)
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"bench-{args.steps}.jsonl")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            size = generate_log(path, args.steps)
            print(
                f"generated {args.steps} steps, {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s"
            )
        v_read(path)  # warm the page cache once, so every variant starts equal
        print(f"log: {path} ({os.path.getsize(path) / 1e6:.0f} MB), {os.cpu_count()} CPUs")
        # rounds of every variant in turn (not one variant N times), so a noisy spell of the
        # machine falls on all of them; each variant keeps its fastest round
        rounds = [
            {name: measure(name, path, args.rate, args.seconds) for name in names}
            for _ in range(max(1, args.repeat))
        ]
        if len(rounds) > 1:
            print(f"best of {len(rounds)} rounds per variant (lag: its worst p99)")
        report({name: _best(name, [r[name] for r in rounds]) for name in names})
    return 0


if __name__ == "__main__":
    sys.exit(main())
