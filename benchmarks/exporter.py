"""The Prometheus exporter's cost per rank: ``dltop export`` following a live job.

    .venv/bin/python benchmarks/exporter.py [--ranks 64] [--rate 20] [--seconds 30]
                                            [--scrape-every 1] [--fsdp] [--quick]

For each job size, a fresh job folder, a real writer process appending ``--rate``
steps/s to every rank (``benchmarks/ranks.py``'s writer: DDP-like steps with
``grad_norm``, or FSDP-like with ``--fsdp``, a heartbeat and a ``sys`` sample a second),
and the real command, ``dltop export --prometheus 127.0.0.1:0 FOLDER``, in its own
process. This script scrapes ``/metrics`` every ``--scrape-every`` seconds as Prometheus
would and measures, after a 5 s warm-up:

- the exporter's CPU (user + system, from /proc via psutil) in % of one core;
- its RSS at the end and its peak over the samples;
- the scrape's wall time (p50 / p99 / max, ms), its size and its series count;
- freshness: how many steps the last scrape's lowest ``dltop_step`` lags what the
  writer had written to rank 0 just before it (the reader polls every 0.2 s).

The anchor is the same on a one-rank job in the same run: the figures per rank are the
difference divided by the ranks added. Printed as ratios to the anchor; no assertion.
``--quick`` is a smoke run (8 ranks, 6 s).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ranks import start_job  # noqa: E402  - the same job files and writer as ranks.py

WARMUP = 5.0  # seconds before measuring: imports, the first read of every file


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs) or [0.0]
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def _scrape(port: int) -> tuple[float, str]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        body = r.read().decode("utf-8")
    return time.perf_counter() - t0, body


def measure(
    folder: str, ranks: int, rate: float, seconds: float, every: float, fsdp: bool
) -> dict[str, Any]:
    start_job(folder, ranks)
    writer = subprocess.Popen(
        [sys.executable, str(HERE / "ranks.py"), "--writer", folder, "--ranks", str(ranks),
         "--rate", str(rate), "--seconds", str(seconds + WARMUP + 2), *([] if fsdp else ["--ddp"])],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    exporter = subprocess.Popen(
        [sys.executable, "-m", "dltop.tui", "export", "--prometheus", "127.0.0.1:0", folder],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert exporter.stderr is not None
        line = exporter.stderr.readline()
        found = re.search(r":(\d+)/metrics", line)
        if not found:
            raise SystemExit(f"the exporter did not start: {line}{exporter.stderr.read()}")
        port = int(found.group(1))
        proc = psutil.Process(exporter.pid)
        end_warmup = time.monotonic() + WARMUP
        while time.monotonic() < end_warmup:
            _scrape(port)
            time.sleep(every)
        cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        times: list[float] = []
        rss: list[int] = []
        body = ""
        written = 0
        while time.monotonic() - t0 < seconds:
            written = _written_step(folder)  # just before the scrape: what it could show
            took, body = _scrape(port)
            times.append(took)
            rss.append(proc.memory_info().rss)
            time.sleep(max(0.0, every - took))
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        wall = time.monotonic() - t0
        exported = [float(m) for m in re.findall(r"^dltop_step\{[^}]*\} (\S+)$", body, re.M)]
    finally:
        exporter.terminate()
        exporter.wait(20)
        writer.kill()
        writer.wait()
    series = sum(1 for ln in body.splitlines() if ln and not ln.startswith("#"))
    return {
        "ranks": ranks,
        "cpu_pct": 100 * cpu / wall,
        "rss_mb": rss[-1] / 2**20,
        "rss_peak_mb": max(rss) / 2**20,
        "scrape_p50_ms": 1e3 * statistics.median(times),
        "scrape_p99_ms": 1e3 * _pct(times, 0.99),
        "scrape_max_ms": 1e3 * max(times),
        "scrapes": len(times),
        "bytes": len(body.encode()),
        "series": series,
        "behind_steps": written - min(exported) if exported else float("nan"),
    }


def _written_step(folder: str) -> int:
    """The last step the writer has appended to rank 0 (read from the file's end)."""
    with open(os.path.join(folder, "rank0.jsonl"), "rb") as f:
        f.seek(max(0, os.path.getsize(f.name) - 8192))
        tail = f.read().decode("utf-8", "replace")
    steps = re.findall(r'"kind":"step","step":(\d+)', tail)
    return int(steps[-1]) if steps else 0


def report(one: dict[str, Any], many: dict[str, Any], every: float, rate: float) -> None:
    n = many["ranks"] - one["ranks"]
    print(f"{os.cpu_count()} CPUs; {rate:g} steps/s per rank; a scrape every {every:g} s")
    head = f"{many['ranks']} ranks"
    print(f"{'':24}{'1 rank':>12}{head:>12}{'ratio':>8}{'per rank':>12}")
    rows = [
        ("exporter CPU, % core", "cpu_pct", "%.2f"),
        ("RSS, MB", "rss_mb", "%.1f"),
        ("RSS peak, MB", "rss_peak_mb", "%.1f"),
        ("scrape p50, ms", "scrape_p50_ms", "%.2f"),
        ("scrape p99, ms", "scrape_p99_ms", "%.2f"),
        ("scrape max, ms", "scrape_max_ms", "%.2f"),
        ("scrape size, bytes", "bytes", "%.0f"),
        ("series", "series", "%.0f"),
    ]
    for label, key, fmt in rows:
        a, b = one[key], many[key]
        ratio = f"{b / a:.1f}x" if a else "-"
        per = (fmt % ((b - a) / n)) if n > 0 else "-"
        print(f"{label:24}{fmt % a:>12}{fmt % b:>12}{ratio:>8}{per:>12}")
    print(f"steps behind the writer at the end: {one['behind_steps']:.0f} (1 rank), "
          f"{many['behind_steps']:.0f} ({many['ranks']} ranks; {rate:g} steps/s, so "
          f"{many['behind_steps'] / rate:.2f} s)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rate", type=float, default=20.0, help="steps/s per rank")
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds measured")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--fsdp", action="store_true", help="FSDP-like steps (grad_sq_local)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 8 ranks, 6 s")
    args = ap.parse_args(argv)
    if args.quick:
        args.ranks, args.seconds = min(args.ranks, 8), 6.0
    with tempfile.TemporaryDirectory() as tmp:
        one = measure(
            os.path.join(tmp, "one"), 1, args.rate, args.seconds, args.scrape_every, args.fsdp
        )
        many = measure(
            os.path.join(tmp, "many"),
            args.ranks,
            args.rate,
            args.seconds,
            args.scrape_every,
            args.fsdp,
        )
    report(one, many, args.scrape_every, args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
