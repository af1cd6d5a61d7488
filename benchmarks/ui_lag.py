"""The app's side of the replay benchmark: time to a fully drawn dashboard, and event-loop
lag while a writer appends 10 k records/s.

    .venv/bin/python benchmarks/ui_lag.py [--steps 1000000] [--keep DIR] [--only a,b]
                                          [--rate 10000] [--seconds 10] [--quick]

``benchmarks/replay.py`` runs ``drawn`` and ``lag`` too, next to all the core's floors, in
one report; this script is the app's side alone.

Each variant runs in its own fresh interpreter (imports excluded from the timings, peak
RSS its own), next to the floors measured in the same run on the same file:

- ``read``     the floor: read the file in 4 MB chunks (benchmarks/replay.py)
- ``orjson``   a plain orjson line-by-line parse of the file (replay.py)
- ``decoder``  the schema's LineDecoder over the file: the parse floor (replay.py)
- ``drawn``    DltopApp on the log (headless, 120x40, replay): seconds until every visible
               panel has drawn data ("ready": the tail shown first), and until the whole
               run is loaded, diagnosed and drawn again ("complete")
- ``lag``      DltopApp following a log while a writer subprocess appends ``--rate``
               records/s for ``--seconds``: the lateness of a 10 ms asyncio sleep on the
               app's event loop (p50/p99/max), the redraw count and how far behind the
               viewer ended

The log comes from ``replay.generate_log`` (the core benchmark's generator). Targets
(issue 4): <= 2 s to a drawn dashboard, lag p99 <= 50 ms. No assertion: figures are
printed with the ratios to the floors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import replay  # noqa: E402  (the core helper's generator and floors)

SIZE = (120, 40)


def _drawn(app: Any) -> bool:
    """Every visible chart has drawn data points (the N/A card counts as drawn)."""
    from dltop.tui.app.chart import Chart

    charts = [
        c for c in app.query(Chart) if c.display and c.parent is not None and c.parent.display
    ]
    if not charts:
        return False
    return all(c.draws > 0 and c.data is not None and c.data.has_points for c in charts)


def v_drawn(path: str) -> dict[str, Any]:
    from dltop.tui.app.app import DltopApp

    out: dict[str, Any] = {}
    lags: list[float] = []

    async def main() -> None:
        t0 = time.perf_counter()
        app = DltopApp(path, follow=False, poll_interval=0.05)
        stop = asyncio.Event()
        task = asyncio.create_task(_probe_loop(stop, lags))  # responsiveness while loading
        async with app.run_test(size=SIZE) as pilot:
            while time.perf_counter() - t0 < 120:
                await pilot.pause(0.01)
                if "ready_s" not in out and _drawn(app):
                    out["ready_s"] = time.perf_counter() - t0
                    out["ready_steps"] = app.model.store.steps
                if "ready_s" in out and app.ended and app.model.loading is None:
                    app.redraw()
                    await pilot.pause()
                    if _drawn(app):
                        out["complete_s"] = time.perf_counter() - t0
                        out["steps"] = app.model.store.steps
                        break
        stop.set()
        await task

    asyncio.run(main())
    ms = sorted(x * 1e3 for x in lags) or [0.0]
    out["load_lag_p99_ms"] = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    out["load_lag_max_ms"] = ms[-1]
    return out


async def _probe_loop(stop: asyncio.Event, lags: list[float]) -> None:
    """A 10 ms sleep that records its own lateness: the event loop's lag."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append(time.perf_counter() - t - 0.01)


def writer(path: str, rate: float, seconds: float) -> None:
    """The appending subprocess: ``rate`` step records per second in 10 ms batches."""
    from dltop.probe.encoding import encode_record

    t_end = time.monotonic() + seconds
    i = 0
    with open(path, "ab") as f:
        f.write(encode_record({"kind": "meta", "v": 1, "run_id": "lag", "host": "h", "pid": 1}))
        next_t = time.monotonic()
        while time.monotonic() < t_end:
            n = max(1, int(rate / 100))
            now = time.time()
            f.write(
                b"".join(
                    encode_record(
                        {
                            "kind": "step",
                            "step": i + k,
                            "t": now,
                            "loss": 1.0 / (i + k + 1),
                            "grad_norm": 1.0,
                            "lr": 1e-3,
                            "data_time": 0.001,
                            "step_time": 0.01,
                            "compute_time": 0.009,
                        }  # fmt: skip
                    )
                    for k in range(n)
                )
            )
            f.flush()
            i += n
            next_t += 0.01
            time.sleep(max(0.0, next_t - time.monotonic()))
    print(i)


def v_lag(path: str, rate: float = 10_000, seconds: float = 10.0) -> dict[str, Any]:
    from dltop.tui.app.app import DltopApp

    live = path + ".live.jsonl"
    Path(live).write_bytes(b"")
    lags: list[float] = []
    out: dict[str, Any] = {}

    redraws: list[float] = []

    async def main() -> None:
        app = DltopApp(live, poll_interval=0.05)
        plain = app.redraw

        def timed_redraw() -> None:  # how much of the lag is our own drawing
            t = time.perf_counter()
            plain()
            redraws.append(time.perf_counter() - t)

        app.redraw = timed_redraw  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.5)
            stop = asyncio.Event()
            task = asyncio.create_task(_probe_loop(stop, lags))
            proc = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--writer",
                    live,
                    "--rate",
                    str(rate),
                    "--seconds",
                    str(seconds),
                ],
                stdout=subprocess.PIPE,
            )
            drawn0 = app.ticks_drawn
            while proc.poll() is None:
                await pilot.pause(0.05)
            written = int(proc.stdout.read() or 0) if proc.stdout else 0
            stop.set()
            await task
            out["records_written"] = written
            out["records_seen_at_end"] = app.model.store.steps
            out["redraws"] = app.ticks_drawn - drawn0
            out["chunks"] = app.chunks

    asyncio.run(main())
    os.unlink(live)
    lags.sort()
    ms = [x * 1e3 for x in lags]
    rd = sorted(x * 1e3 for x in redraws) or [0.0]
    out["redraw_p50_ms"] = rd[len(rd) // 2]
    out["redraw_max_ms"] = rd[-1]
    out.update(
        samples=len(ms),
        lag_p50_ms=ms[len(ms) // 2],
        lag_p99_ms=ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        lag_max_ms=ms[-1],
        rate=rate,
        seconds=seconds,
    )
    return out


VARIANTS = {
    "read": replay.v_read,
    "orjson": replay.v_orjson,
    "decoder": replay.v_decoder,
    "drawn": v_drawn,
    "lag": v_lag,
}


def child(name: str, path: str, rate: float, seconds: float) -> dict[str, Any]:
    if name == "drawn":  # import Textual and the app before the clock starts
        import dltop.tui.app.app  # noqa: F401
    t0 = time.perf_counter()
    res = v_lag(path, rate, seconds) if name == "lag" else VARIANTS[name](path)
    res["seconds"] = res.get("seconds", time.perf_counter() - t0) if name != "lag" else seconds
    res["wall_s"] = time.perf_counter() - t0
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


def measure(name: str, path: str, rate: float, seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name, "--log", path, "--rate", str(rate),
           "--seconds", str(seconds)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(res: dict[str, dict[str, Any]], steps: int) -> None:
    read = res.get("read", {}).get("wall_s")
    for name, r in res.items():
        if "error" in r:
            print(f"{name:8s} ERROR {r['error']}")
            continue
        ratio = f"  ({r['wall_s'] / read:.1f}x read)" if read and name != "lag" else ""
        if name == "drawn":
            print(
                f"drawn    ready {r.get('ready_s', float('nan')):.2f} s ({r.get('ready_steps')} steps shown)  "
                f"complete {r.get('complete_s', float('nan')):.2f} s ({r.get('steps')} steps)"
                f"  peak RSS {r['peak_rss_mb']:.0f} MB{ratio}   target <= 2 s\n"
                f"         event-loop lag while loading: p99 {r['load_lag_p99_ms']:.0f} ms, "
                f"max {r['load_lag_max_ms']:.0f} ms"
            )
        elif name == "lag":
            print(
                f"lag      p50 {r['lag_p50_ms']:.1f} ms  p99 {r['lag_p99_ms']:.1f} ms  max {r['lag_max_ms']:.1f} ms"
                f"  ({r['samples']} samples, {r['rate']:.0f} rec/s for {r['seconds']:.0f} s; "
                f"{r['records_seen_at_end']}/{r['records_written']} seen at the end, "
                f"{r['redraws']} redraws (p50 {r['redraw_p50_ms']:.1f} ms, max {r['redraw_max_ms']:.1f} ms), "
                f"{r['chunks']} chunk messages)   target p99 <= 50 ms"
            )
        else:
            print(f"{name:8s} {r['wall_s']:.2f} s  peak RSS {r['peak_rss_mb']:.0f} MB{ratio}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--only", default="", help="comma-separated variants (default: all)")
    ap.add_argument("--keep", default="", help="write/reuse the log in this directory")
    ap.add_argument("--rate", type=float, default=10_000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 k steps, 2 s of lag")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--log", default="", help=argparse.SUPPRESS)
    ap.add_argument("--writer", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.writer:
        writer(args.writer, args.rate, args.seconds)
        return 0
    if args.child:
        print(json.dumps(child(args.child, args.log, args.rate, args.seconds)))
        return 0
    if args.quick:
        args.steps = min(args.steps, 20_000)
        args.seconds = min(args.seconds, 2.0)
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        path = os.path.join(folder, f"bench-{args.steps}.jsonl")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            size = replay.generate_log(path, args.steps)
            print(
                f"generated {args.steps} steps, {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s"
            )
        replay.v_read(path)  # warm the page cache once
        print(f"log: {path} ({os.path.getsize(path) / 1e6:.0f} MB), {os.cpu_count()} CPUs, "
              f"terminal {SIZE[0]}x{SIZE[1]} (headless)")  # fmt: skip
        report({n: measure(n, path, args.rate, args.seconds) for n in names}, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
