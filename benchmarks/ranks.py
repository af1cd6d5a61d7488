"""Many ranks: the viewer following a job's rank files live, and `dltop check` on a big job.

    .venv/bin/python benchmarks/ranks.py [--ranks 64] [--rate 20] [--seconds 20]
                                         [--steps 100000] [--only a,b] [--keep DIR] [--quick]

Each variant runs in its own fresh interpreter (imports excluded from the timings, peak
RSS its own):

- ``follow1``  the anchor: the viewer's core (``dirsource.DirectorySource`` into a
               ``RunModel``, as the app opens a folder) following a one-rank job while a
               writer appends ``--rate`` steps/s to it, with an asyncio loop in the main
               thread whose 10 ms sleep measures its own lateness (the event loop's lag:
               the reader threads hold the GIL it needs)
- ``follow``   the same on a ``--ranks``-rank job, ``--rate`` steps/s on every rank: every
               rank followed into its own model (the viewer's per-rank threads, capped at
               ``DirectorySource.MAX_RANKS``), and the sharded grad norm joined live from
               every rank's ``grad_sq_local`` (``peers.PeerJoin``: the logs are FSDP-like)
- ``followddp`` the same job logging ``grad_norm`` (DDP-like, nothing to join): the
               difference to ``follow`` is the live join's cost
- ``app``      the real app (``DltopApp``, headless 120x40) following the same job:
               event-loop lag while it draws (skipped when the app cannot open it)
- ``decode``   the floor for ``check``: the schema's ``LineDecoder`` over every rank
               file of a ``--ranks`` x ``--steps`` job
- ``check``    ``dltop check``'s work on that job (``check_cmd.collect``: every rank
               through its rules, the cross-rank judgement, the sharded norm joined),
               the ranks other than the first in worker processes, one per CPU
- ``check1``   the same in one process (``collect(jobs=1)``): what the workers save

Figures per rank are the difference to the anchor divided by the ranks added (live), or
the total divided by the ranks (check); ``check`` and ``check1`` are also printed as
ratios to ``decode`` measured in the same run (one process: the floor of one CPU), and
their peak RSS is the largest of the check's own and any worker's. ``--quick`` is a smoke run (16 ranks, 3 s of
appends, 2 000 steps): same code paths, figures not comparable. No assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIZE = (120, 40)


# -- logs -------------------------------------------------------------------------------------
def _meta(rank: int, world: int) -> dict[str, Any]:
    return {"kind": "meta", "v": 1, "run_id": f"bench.rank{rank}", "host": f"node{rank // 8}",
            "pid": 10_000 + rank, "rank": rank, "local_rank": rank % 8, "world_size": world,
            "t": time.time()}  # fmt: skip


def _step(step: int, t: float, rng: random.Random, sharded: bool = True) -> dict[str, Any]:
    """A step as an FSDP rank logs it: no grad_norm, its share of the squared norm (or,
    not ``sharded``, as a DDP rank does: the norm)."""
    data = 0.002 + rng.random() * 0.001
    fwd = 0.010 + rng.random() * 0.002
    bwd = 0.020 + rng.random() * 0.004
    return {"kind": "step", "step": step, "t": round(t, 6), "loss": 2.0 / (1 + step / 1e4),
            "lr": 3e-4, "data_time": round(data, 6), "step_time": round(data + fwd + bwd, 6),
            "compute_time": round(fwd + bwd, 6), "forward_time": round(fwd, 6),
            "backward_time": round(bwd, 6), "batch_size": 64,
            "samples_per_s": round(64 / (data + fwd + bwd), 3),
            "mem_allocated": 1_200_000_000 + (step % 1000) * 1000, "mem_reserved": 2_000_000_000,
            ("grad_sq_local" if sharded else "grad_norm"): 0.02 + rng.random() * 0.01}  # fmt: skip


def generate_job(folder: str, ranks: int, steps: int) -> int:
    """``ranks`` finished rank files of ``steps`` steps each; returns the bytes written.
    Rank 0's body is generated, the others copy it under their own meta (the cost of
    reading does not depend on the values)."""
    from dltop.probe.encoding import encode_record

    os.makedirs(folder, exist_ok=True)
    rng = random.Random(0)
    body = os.path.join(folder, "body.tmp")
    t = 1_700_000_000.0
    with open(body, "wb") as f:
        out: list[bytes] = []
        for i in range(steps):
            t += 0.035
            out.append(encode_record(_step(i, t, rng)))
            if i % 100 == 0:
                out.append(encode_record({"kind": "sys", "t": t, "rss": 3.1e9, "cpu": 99.0}))
                out.append(encode_record({"kind": "heartbeat", "t": t, "step": i, "steps": i}))
            if len(out) >= 10_000:
                f.write(b"".join(out))
                out.clear()
        out.append(encode_record({"kind": "event", "type": "exit", "status": "ok", "t": t}))
        f.write(b"".join(out))
    total = 0
    for r in range(ranks):
        path = os.path.join(folder, f"rank{r}.jsonl")
        with open(path, "wb") as dst, open(body, "rb") as src:
            dst.write(encode_record(_meta(r, ranks)))
            shutil.copyfileobj(src, dst, 4 << 20)
        total += os.path.getsize(path)
    os.unlink(body)
    return total


def start_job(folder: str, ranks: int) -> None:
    """An empty live job: one rank file per rank holding its meta line."""
    from dltop.probe.encoding import encode_record

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for r in range(ranks):
        Path(folder, f"rank{r}.jsonl").write_bytes(encode_record(_meta(r, ranks)))


def writer(folder: str, ranks: int, rate: float, seconds: float, sharded: bool = True) -> None:
    """The training's side: every rank appends ``rate`` steps/s (and a heartbeat and a
    ``sys`` sample a second), whole lines per write as the probe does; prints the records."""
    from dltop.probe.encoding import encode_record

    fds = [os.open(os.path.join(folder, f"rank{r}.jsonl"), os.O_WRONLY | os.O_APPEND)
           for r in range(ranks)]  # fmt: skip
    rngs = [random.Random(r) for r in range(ranks)]
    period = 1.0 / rate
    t_end = time.monotonic() + seconds
    next_t = time.monotonic()
    step = records = 0
    while time.monotonic() < t_end:
        now = time.time()
        for fd, rng in zip(fds, rngs, strict=True):
            recs = [_step(step, now, rng, sharded)]
            if step % max(1, int(rate)) == 0:
                recs.append({"kind": "heartbeat", "t": now, "step": step, "steps": step + 1})
                recs.append({"kind": "sys", "t": now, "rss": 3.1e9, "cpu": 99.0})
            os.write(fd, b"".join(encode_record(x) for x in recs))
            records += len(recs)
        step += 1
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))
    for fd in fds:
        os.close(fd)
    print(json.dumps({"records": records, "steps": step}))


# -- variants (each in a fresh interpreter) ----------------------------------------------------
async def _lag_probe(stop: asyncio.Event, lags: list[float]) -> None:
    """A 10 ms sleep that records its own lateness: the event loop's lag."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append(time.perf_counter() - t - 0.01)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs) or [0.0]
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def _lag_figures(lags: list[float]) -> dict[str, float]:
    """The event loop's lag percentiles, in ms."""
    return {
        "lag_p50_ms": round(_pct(lags, 0.5) * 1e3, 2),
        "lag_p99_ms": round(_pct(lags, 0.99) * 1e3, 2),
        "lag_max_ms": round(max(lags or [0.0]) * 1e3, 2),
    }


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _spawn_writer(
    folder: str, ranks: int, rate: float, seconds: float, sharded: bool = True
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--writer", folder, "--ranks", str(ranks),
         "--rate", str(rate), "--seconds", str(seconds), *([] if sharded else ["--ddp"])],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def v_follow(
    folder: str, ranks: int, rate: float, seconds: float, sharded: bool = True
) -> dict[str, Any]:
    from dltop.tui.core.sources.dirsource import DirectorySource
    from dltop.tui.core.store.run import RunModel

    start_job(folder, ranks)
    ingested = [0]
    lock = threading.Lock()

    def on_update(n: int) -> None:
        with lock:
            ingested[0] += n

    model = RunModel("rank0")
    src = DirectorySource(folder, model, on_update=on_update)
    join_s = [0.0]  # time in the live join (peers.PeerJoin): reading the peers, joining
    if hasattr(src, "join"):
        for name in ("offer", "release"):
            plain = getattr(src.join, name)

            def timed(*args: Any, _plain: Any = plain, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return _plain(*args, **kwargs)
                finally:
                    join_s[0] += time.perf_counter() - t

            setattr(src.join, name, timed)
    lags: list[float] = []
    out: dict[str, Any] = {}

    async def main() -> None:
        src.start()
        await asyncio.sleep(0.5)
        stop = asyncio.Event()
        probe = asyncio.create_task(_lag_probe(stop, lags))
        cpu0, t0, n0, j0 = _cpu_s(), time.perf_counter(), ingested[0], join_s[0]
        proc = _spawn_writer(folder, ranks, rate, seconds, sharded)
        while proc.poll() is None:
            await asyncio.sleep(0.25)  # the UI's tick: what it reads is cheap next to this
            for r in getattr(src, "ranks", ()):
                with r.model.lock:
                    _ = r.model.store.steps
        written = json.loads(proc.stdout.read() if proc.stdout else "{}")
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        join_ms = (join_s[0] - j0) * 1e3 / wall
        await asyncio.sleep(1.0)  # let the readers catch up, then count
        stop.set()
        await probe
        out.update(
            records_written=written.get("records"),
            steps_per_rank=written.get("steps"),
            records_ingested=ingested[0] - n0,  # 1 s after the writer stopped
            ingested_per_s=round((ingested[0] - n0) / wall, 1),
            written_per_s=round(written.get("records", 0) / wall, 1),
            cpu_pct=round(100 * cpu / wall, 1),
            ranks_followed=len(getattr(src, "ranks", ())) or 1,
            rank0_steps=model.store.steps,
            norms_joined=src.join.joined if hasattr(src, "join") else None,
            norms_incomplete=src.join.incomplete if hasattr(src, "join") else None,
            join_ms_per_s=round(join_ms, 2),  # wall time in the join, per second of appends
        )
        src.stop()

    asyncio.run(main())
    return out | _lag_figures(lags)


def v_app(folder: str, ranks: int, rate: float, seconds: float) -> dict[str, Any]:
    from dltop.tui.app.app import DltopApp

    start_job(folder, ranks)
    lags: list[float] = []
    out: dict[str, Any] = {}

    async def main() -> None:
        app = DltopApp(folder, poll_interval=0.2)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.5)
            stop = asyncio.Event()
            probe = asyncio.create_task(_lag_probe(stop, lags))
            cpu0, t0 = _cpu_s(), time.perf_counter()
            proc = _spawn_writer(folder, ranks, rate, seconds)
            drawn0 = app.ticks_drawn
            while proc.poll() is None:
                await pilot.pause(0.05)
            written = json.loads(proc.stdout.read() if proc.stdout else "{}")
            wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
            stop.set()
            await probe
            out.update(
                records_written=written.get("records"),
                cpu_pct=round(100 * cpu / wall, 1),
                redraws=app.ticks_drawn - drawn0,
                rank0_steps=app.model.store.steps,
            )

    asyncio.run(main())
    return out | _lag_figures(lags)


def v_decode(folder: str, **_: Any) -> dict[str, Any]:
    from dltop.probe.decoding import LineDecoder

    n = 0
    for name in sorted(os.listdir(folder)):
        dec = LineDecoder()
        with open(os.path.join(folder, name), "rb") as f:
            while chunk := f.read(1 << 20):
                n += len(dec.feed(chunk))
    return {"records": n}


def v_check(folder: str, jobs: int | None = None, **_: Any) -> dict[str, Any]:
    from dltop.tui.check_cmd import collect
    from dltop.tui.core.rules import Config

    results, skipped = collect(folder, Config(), jobs=jobs)
    return {
        "files": len(results),
        "steps": max(r.engine.steps for r in results),
        "alerts": sum(len(r.engine.alerts()) for r in results),
        "notes": [n for r in results for n in r.notes],
        "skipped": len(skipped),
    }


def v_check1(folder: str, **_: Any) -> dict[str, Any]:
    return v_check(folder, jobs=1)


def v_followddp(folder: str, ranks: int, rate: float, seconds: float) -> dict[str, Any]:
    return v_follow(folder, ranks, rate, seconds, sharded=False)


VARIANTS = {"follow1": v_follow, "follow": v_follow, "followddp": v_followddp, "app": v_app,
            "decode": v_decode, "check": v_check, "check1": v_check1}  # fmt: skip


def _rss_mb() -> float:
    """Peak RSS of this process or of any worker it waited for (check's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, workers) / 1024, 1)


def _cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of the workers it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def run_variant(name: str, folder: str, ranks: int, rate: float, seconds: float) -> dict[str, Any]:
    """Child process body: imports before the clock and the RSS baseline."""
    import dltop.tui.check_cmd  # noqa: F401
    import dltop.tui.core.sources.filesource  # noqa: F401
    import msgspec  # noqa: F401

    if name == "app":
        import dltop.tui.app.app  # noqa: F401
    base = _rss_mb()
    own0, kids0 = _cpu_s()
    t0 = time.perf_counter()
    out = VARIANTS[name](folder, ranks=ranks, rate=rate, seconds=seconds)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    own, kids = _cpu_s()
    # where the CPU went: on 2 CPUs the wall time is about their sum over 2, so what this
    # process spends (the first rank, the workers' results taken in) is taken from them
    out["cpu_own_s"], out["cpu_workers_s"] = round(own - own0, 2), round(kids - kids0, 2)
    out["peak_rss_mb"] = _rss_mb()
    out["baseline_rss_mb"] = base
    return out


def measure(name: str, folder: str, ranks: int, rate: float, seconds: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name, "--dir", folder, "--ranks", str(ranks),
         "--rate", str(rate), "--seconds", str(seconds)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report -----------------------------------------------------------------------------------
def report(res: dict[str, dict[str, Any]], ranks: int, steps: int, rate: float) -> None:
    for name, r in res.items():
        print(f"{name:<8} {json.dumps(r)}")
    print()
    one, many = res.get("follow1", {}), res.get("follow", {})
    if "lag_p99_ms" in many:
        print(
            f"follow: {many['ranks_followed']} of {ranks} ranks followed at {rate:g} steps/s "
            f"each: {many['ingested_per_s']:.0f} records/s ingested "
            f"({many['written_per_s']:.0f}/s written; {many['records_ingested']} of "
            f"{many['records_written']} in by 1 s after the end), event-loop lag p50 "
            f"{many['lag_p50_ms']:.1f} ms, p99 {many['lag_p99_ms']:.1f} ms, max "
            f"{many['lag_max_ms']:.1f} ms; CPU {many['cpu_pct']:.0f} % of a core; peak RSS "
            f"{many['peak_rss_mb']:.0f} MB; sharded norms joined {many['norms_joined']}, "
            f"incomplete {many['norms_incomplete']}; time in the live join "
            f"{many['join_ms_per_s']:.1f} ms per second ({many['join_ms_per_s'] / max(1, ranks - 1):.3f} "
            f"ms per peer rank)"
        )
    if "lag_p99_ms" in one and "lag_p99_ms" in many and ranks > 1:
        added = ranks - 1
        print(
            f"anchor (1 rank): lag p99 {one['lag_p99_ms']:.1f} ms, CPU {one['cpu_pct']:.1f} %, "
            f"peak RSS {one['peak_rss_mb']:.0f} MB; per added rank: "
            f"{(many['cpu_pct'] - one['cpu_pct']) / added * 10:.2f} ms CPU per second, "
            f"{(many['peak_rss_mb'] - one['peak_rss_mb']) / added:.2f} MB"
        )
    ddp = res.get("followddp", {})
    if "cpu_pct" in ddp and "cpu_pct" in many:
        print(
            f"followddp (the same job, nothing to join): CPU {ddp['cpu_pct']:.1f} %, lag p99 "
            f"{ddp['lag_p99_ms']:.1f} ms, peak RSS {ddp['peak_rss_mb']:.0f} MB; the live join "
            f"of {ranks} ranks' shares: {(many['cpu_pct'] - ddp['cpu_pct']) * 10:.1f} ms CPU per "
            f"second ({(many['cpu_pct'] - ddp['cpu_pct']) * 10 / max(1, ranks - 1):.3f} per peer)"
        )
    app = res.get("app", {})
    if "lag_p99_ms" in app:
        print(
            f"app: {ranks} ranks at {rate:g} steps/s: event-loop lag p50 {app['lag_p50_ms']:.1f} "
            f"ms, p99 {app['lag_p99_ms']:.1f} ms, max {app['lag_max_ms']:.1f} ms; CPU "
            f"{app['cpu_pct']:.0f} %; {app['redraws']} redraws; peak RSS {app['peak_rss_mb']:.0f} MB"
        )
    dec = res.get("decode", {})
    for name, how in (("check1", "one process"), ("check", "worker processes")):
        chk = res.get(name, {})
        if "seconds" not in chk or "error" in chk:
            continue
        ratio = f", {chk['seconds'] / dec['seconds']:.1f}x the decode floor" if dec.get(
            "seconds") else ""  # fmt: skip
        print(
            f"{name} ({how}): {ranks} ranks x {steps} steps in {chk['seconds']:.1f} s{ratio} "
            f"({chk['seconds'] / ranks * 1e3:.0f} ms and "
            f"{(chk['peak_rss_mb'] - chk['baseline_rss_mb']) / ranks:.2f} MB per rank; peak "
            f"RSS {chk['peak_rss_mb']:.0f} MB); CPU {chk['cpu_own_s']:.1f} s here + "
            f"{chk['cpu_workers_s']:.1f} s in workers; {chk['notes']}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rate", type=float, default=20.0, help="steps/s per rank")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of appending")
    ap.add_argument("--steps", type=int, default=100_000, help="steps per rank for check")
    ap.add_argument("--only", default="", help="comma-separated variants (default: all)")
    ap.add_argument("--keep", default="", help="write/reuse the check job in this directory")
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 ranks, 3 s, 2000 steps")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--writer", default="", help=argparse.SUPPRESS)
    ap.add_argument("--dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--ddp", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.writer:
        writer(args.writer, args.ranks, args.rate, args.seconds, sharded=not args.ddp)
        return 0
    if args.child:
        out = run_variant(args.child, args.dir, args.ranks, args.rate, args.seconds)
        print(json.dumps(out))
        return 0
    if args.quick:
        args.ranks, args.seconds, args.steps = min(args.ranks, 16), 3.0, 2_000
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(args.keep or tmp, f"job-{args.ranks}x{args.steps}")
        if {"decode", "check", "check1"} & set(names) and not os.path.isdir(big):
            t0 = time.perf_counter()
            size = generate_job(big, args.ranks, args.steps)
            print(f"generated {args.ranks} ranks x {args.steps} steps, {size / 1e6:.0f} MB "
                  f"in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        if {"decode", "check", "check1"} & set(names):
            v_decode(big)  # warm the page cache once
        print(f"{os.cpu_count()} CPUs")
        res: dict[str, dict[str, Any]] = {}
        for name in names:
            live = os.path.join(tmp, f"live-{name}")
            ranks = 1 if name == "follow1" else args.ranks
            folder = big if name in ("decode", "check", "check1") else live
            res[name] = measure(name, folder, ranks, args.rate, args.seconds)
        report(res, args.ranks, args.steps, args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
