"""The probe under overload: the sustained rate that keeps every record, and what happens above it.

Run:  .venv/bin/python benchmarks/probe_sustained.py [--quick]
(also section (g) of benchmarks/probe_overhead.py)

A loop calls ``probe.step(loss=float)`` at a fixed target rate (in chunks, sleeping
between them as a training thread does while torch works without the GIL) for a few
seconds per rate, with the log only and with the log plus a live viewer reading the
socket. For each rate it prints the rate reached, the share of steps kept in the log,
the ``dropped`` events the log holds for the rest (kept + dropped must equal the calls)
and the longest ``step()`` call. The anchor is the same loop without a probe, measured
in the same run: the highest rate the loop itself can reach.

Then it stops the writer (holds its lock), fills the queue past its cap and reports
the memory the full queue holds (tracemalloc) and that the calls beyond the cap were
counted, not kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
import tracemalloc
from typing import Any

from dltop.probe import Probe
from dltop.probe.writer import QUEUE_MAX

CHUNK_S = 0.002  # the loop sleeps every 2 ms of steps (torch releases the GIL as often)


def _paced(step: Any, rate: float, seconds: float) -> tuple[int, float, float]:
    """Calls of ``step(i)`` at ``rate`` per second: (calls, rate reached, longest call s)."""
    pc = time.perf_counter
    per_chunk = max(1, int(min(2000.0, rate * CHUNK_S)))
    start = pc()
    end = start + seconds
    n = 0
    worst = 0.0
    while True:
        now = pc()
        if now >= end:
            break
        due = start + n / rate if rate != float("inf") else now
        if due > now:
            time.sleep(due - now)
        for _ in range(per_chunk):
            t0 = pc()
            step(n)
            dt = pc() - t0
            if dt > worst:
                worst = dt
            n += 1
    return n, n / (pc() - start), worst


def _reader(path: str, stop: threading.Event, counts: dict[str, int]) -> None:
    """A live viewer's socket end: reads and counts lines until told to stop."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(200):
        try:
            sock.connect(path)
            break
        except OSError:
            time.sleep(0.01)
    sock.settimeout(0.2)
    with sock:
        while not stop.is_set():
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            counts["lines"] += chunk.count(b"\n")


def _log_counts(path: str) -> tuple[int, int, int]:
    """(steps, dropped records from the log's events, gap events) in a finished log."""
    steps = dropped = gaps = 0
    with open(path, "rb") as f:
        for line in f:
            if line.startswith(b'{"kind":"step"'):
                steps += 1
            elif b'"type":"dropped"' in line:
                rec = json.loads(line)
                if rec.get("scope") == "log":
                    dropped += rec["records"]
                    gaps += 1
    return steps, dropped, gaps


def one_rate(tmp: str, rate: float, seconds: float, live: bool) -> dict[str, Any]:
    tag = "full" if rate == float("inf") else str(int(rate))
    path = os.path.join(tmp, f"r{tag}-{int(live)}.jsonl")
    stop = threading.Event()
    counts = {"lines": 0}
    reader = None
    with Probe(path=path, system=False, socket=live, run_id=f"bench{tag}") as probe:
        if live:
            (sink,) = [s for s in probe._writer.sinks if type(s).__name__ == "LiveSink"]
            reader = threading.Thread(
                target=_reader, args=(sink.server.unix_path, stop, counts), daemon=True
            )
            reader.start()
            time.sleep(0.2)
        n, reached, worst = _paced(lambda i: probe.step(loss=1.0 / (i + 1)), rate, seconds)
    stop.set()
    if reader is not None:
        reader.join(5)
    steps, dropped, gaps = _log_counts(path)
    return {
        "rate": rate,
        "reached": reached,
        "calls": n,
        "kept": steps,
        "dropped": dropped,
        "gaps": gaps,
        "worst_ms": worst * 1e3,
        "accounted": steps + dropped == n,
    }


def full_queue_memory(tmp: str) -> dict[str, Any]:
    """Hold the writer, call step() past the cap: bytes the full queue holds, calls counted."""
    path = os.path.join(tmp, "full.jsonl")
    extra = 10_000
    with Probe(path=path, system=False, socket=False) as probe:
        w = probe._writer
        assert w is not None
        with w._lock:  # the writer thread waits here: nothing leaves the queue
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(QUEUE_MAX + extra):
                probe.step(loss=1.0 / (i + 1))
            held = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            counted = w.dropped
    steps, dropped, _ = _log_counts(path)
    return {"bytes": held, "counted": counted, "extra": extra, "steps": steps, "dropped": dropped}


def anchor_rate(seconds: float) -> float:
    """The loop alone, unpaced: how fast the bare loop calls a no-op."""
    n, reached, _ = _paced(lambda i: None, 1e9, seconds)
    return reached


def run(quick: bool, out: Any = sys.stdout) -> None:
    seconds = 1.5 if quick else 4.0
    full = float("inf")  # unpaced: as fast as the loop goes
    rates = (
        (25_000, 100_000, 400_000, full)
        if quick
        else (25_000, 50_000, 100_000, 200_000, 400_000, 800_000, full)
    )
    with tempfile.TemporaryDirectory() as tmp:
        bare = anchor_rate(seconds / 2)
        print(
            f"(g) sustained rate: probe.step(loss) paced, {seconds:g} s per rate; the same loop "
            f"calling a no-op reaches {bare / 1e3:,.0f} k calls/s (the anchor)",
            file=out,
        )
        print(
            f"  {'target/s':>9} {'reached/s':>10} {'viewer':>6} {'kept':>8} {'dropped':>9} "
            f"{'gaps':>5} {'all counted':>11} {'longest step()':>15}",
            file=out,
        )
        best: dict[bool, float] = {False: 0.0, True: 0.0}
        for live in (False, True):
            for rate in rates:
                r = one_rate(tmp, rate, seconds, live)
                kept = r["kept"] / max(1, r["calls"])
                if r["dropped"] == 0 and r["accounted"]:
                    best[live] = max(best[live], r["reached"])
                target = "full" if rate == full else f"{rate:,.0f}"
                print(
                    f"  {target:>9} {r['reached']:>10,.0f} {'yes' if live else 'no':>6} "
                    f"{kept:>7.1%} {r['dropped']:>9,} {r['gaps']:>5} "
                    f"{'yes' if r['accounted'] else 'NO':>11} {r['worst_ms']:>12.1f} ms",
                    file=out,
                )
        for live in (False, True):
            print(
                f"  every record kept up to {best[live] / 1e3:,.0f} k steps/s "
                f"({'log + live viewer' if live else 'log only'}; "
                f"1/{bare / max(best[live], 1):.0f} of the no-op loop's rate)",
                file=out,
            )
        m = full_queue_memory(tmp)
        ok = m["counted"] == m["extra"] and m["dropped"] == m["extra"]
        print(
            f"  full queue ({QUEUE_MAX:,} records): {m['bytes'] / 2**20:.0f} MiB held "
            f"({m['bytes'] / QUEUE_MAX:.0f} B per step); {m['counted']:,} calls beyond the cap "
            f"counted, {m['dropped']:,} in the log's dropped events "
            f"({'exact' if ok else 'MISMATCH'})\n",
            file=out,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter rates (a smoke run)")
    args = ap.parse_args()
    print(f"dltop probe under overload  (python {sys.version.split()[0]}, {os.cpu_count()} cpus)\n")
    run(args.quick)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
