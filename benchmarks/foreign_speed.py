"""`dltop check` on the same run written by four tools: time and peak memory.

Why: other tools' logs must not be the slow or the capped path (issue 31: a 200 k-step
TensorBoard file took 18 s and 416 MB against 1.9 s for our JSONL; a 1 M-step one was
refused). One synthetic run (loss, grad norm, lr, step time, data time, samples/s each
step; an eval every 1000 steps) is written as our JSONL, a TensorBoard event file, a
Hugging Face trainer_state.json and a Lightning metrics.csv; each is checked by
`dltop check --json` in a fresh process (best of --repeat), and the ratios are against
the JSONL measured in the same run.

    python benchmarks/foreign_speed.py [--steps 1000000] [--repeat 1] [--keep DIR]
                                       [--only tensorboard,hf,lightning]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

Row = tuple[
    int, float, float, float, float, float, float, float
]  # step, t, loss, gn, lr, st, dt, sps


def rows(steps: int, seed: int = 0) -> Iterator[Row]:
    rng = random.Random(seed)
    t = 1_700_000_000.0
    for i in range(steps):
        data = 0.002 + rng.random() * 0.001
        step = data + 0.030 + rng.random() * 0.004
        t += step
        loss = 2.5 * math.exp(-i / (steps / 3)) + 0.3 + rng.random() * 0.05
        lr = 3e-4 * min(1.0, (i + 1) / 2000)
        yield (
            i,
            round(t, 6),
            loss,
            1.0 + rng.random(),
            lr,
            round(step, 6),
            round(data, 6),
            64 / step,
        )


def write_jsonl(path: Path, steps: int) -> None:
    from dltop.probe.encoding import encode_record

    with path.open("wb") as f:
        f.write(encode_record({"kind": "meta", "v": 1, "run_id": "b", "pid": 1, "t": 1.7e9}))
        out: list[bytes] = []
        for i, t, loss, gn, lr, st, dt, sps in rows(steps):
            rec = {"kind": "step", "step": i, "t": t, "loss": loss, "grad_norm": gn, "lr": lr}
            rec |= {"step_time": st, "data_time": dt, "samples_per_s": sps}
            out.append(encode_record(rec))
            if i % 1000 == 999:
                out.append(encode_record({"kind": "eval", "step": i, "t": t, "loss": loss + 0.1}))
            if len(out) >= 10_000:
                f.write(b"".join(out))
                out.clear()
        f.write(b"".join(out))


def write_tensorboard(folder: Path, steps: int) -> None:
    from dltop.tui.core.sources.foreign.tfrecord import frame
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    tags = ("train/loss", "train/grad_norm", "train/learning_rate")
    tags += ("step_time", "data_time", "samples_per_s")
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "events.out.tfevents.1700000000.bench.1.0").open("wb") as f:
        f.write(frame(Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()))
        out: list[bytes] = []
        for i, t, loss, gn, lr, st, dt, sps in rows(steps):
            for tag, v in zip(tags, (loss, gn, lr, st, dt, sps), strict=True):
                s = Summary(value=[Summary.Value(tag=tag, simple_value=v)])
                out.append(frame(Event(wall_time=t, step=i, summary=s).SerializeToString()))
            if i % 1000 == 999:
                s = Summary(value=[Summary.Value(tag="eval/loss", simple_value=loss + 0.1)])
                out.append(frame(Event(wall_time=t, step=i, summary=s).SerializeToString()))
            if len(out) >= 10_000:
                f.write(b"".join(out))
                out.clear()
        f.write(b"".join(out))


def write_hf(path: Path, steps: int) -> None:
    with path.open("w") as f:
        f.write(f'{{"global_step": {steps}, "max_steps": {steps}, "log_history": [\n')
        sep = ""
        for i, _t, loss, gn, lr, _st, _dt, _sps in rows(steps):
            f.write(f'{sep}{{"epoch": {i / 1000}, "grad_norm": {gn}, "learning_rate": {lr}, ')
            f.write(f'"loss": {loss}, "step": {i + 1}}}')
            sep = ",\n"
            if i % 1000 == 999:
                f.write(f',\n{{"eval_loss": {loss + 0.1}, "step": {i + 1}}}')
        f.write("\n]}\n")


def write_lightning(path: Path, steps: int) -> None:
    with path.open("w") as f:
        f.write("epoch,step,train_loss_step,grad_norm,lr-AdamW,val_loss\n")
        for i, _t, loss, gn, lr, _st, _dt, _sps in rows(steps):
            f.write(f"{i // 1000},{i},{loss},{gn},{lr},\n")
            if i % 1000 == 999:
                f.write(f"{i // 1000},{i},,,,{loss + 0.1}\n")


def check(path: Path) -> tuple[float, float, int]:
    """Seconds, peak RSS (MB) and steps of one `dltop check --json` in a fresh process."""
    t0 = time.perf_counter()
    child = [sys.executable, "-m", "dltop.tui", "check", str(path), "--json"]
    done = subprocess.run(child, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    steps = 0
    try:
        steps = int(json.loads(done.stdout).get("steps") or 0)
    except ValueError:
        print(done.stdout[-300:], done.stderr[-300:], file=sys.stderr)
    # the largest of any child so far, and a child's peak starts at its parent's: this
    # runs in a fresh, small process per measurement (``--one``, see main)
    return wall, peak / 1024, steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", default="", help="write/reuse the logs in this directory")
    ap.add_argument(
        "--only", default="", help="comma-separated logs to write and check (jsonl is always)"
    )
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # a fresh measuring process, so each peak RSS is this check's own
        wall, peak, steps = check(Path(args.one))
        print(json.dumps({"s": wall, "mb": peak, "steps": steps}))
        return 0
    root = Path(args.keep or tempfile.mkdtemp(prefix="dltop-foreign-"))
    root.mkdir(parents=True, exist_ok=True)
    n = args.steps
    logs = {
        "jsonl": (root / f"run-{n}.jsonl", write_jsonl),
        "tensorboard": (root / f"tb-{n}", write_tensorboard),
        "hf": (root / f"hf-{n}" / "trainer_state.json", write_hf),
        "lightning": (root / f"pl-{n}" / "metrics.csv", write_lightning),
    }
    if args.only:  # the JSONL stays: it is the anchor of every ratio
        keep = {"jsonl", *args.only.split(",")}
        logs = {k: v for k, v in logs.items() if k in keep}
    for _name, (path, write) in logs.items():
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            write(path, n)
            print(f"wrote {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    results: dict[str, tuple[float, float, int]] = {}
    for name, (path, _) in logs.items():
        best: tuple[float, float, int] | None = None
        for _ in range(args.repeat):
            me = [sys.executable, __file__, "--one", str(path)]
            got = json.loads(subprocess.run(me, capture_output=True, text=True).stdout)
            if best is None or got["s"] < best[0]:
                best = (got["s"], got["mb"], got["steps"])
        assert best is not None
        results[name] = best
    anchor = results["jsonl"][0]
    size = {
        k: sum(f.stat().st_size for f in (p.rglob("*") if p.is_dir() else [p]))
        for k, (p, _) in logs.items()
    }
    print(f"dltop check on one {n}-step run written by each tool (best of {args.repeat})")
    print(
        f"{'log':<12} {'MB on disk':>10} {'steps':>9} {'seconds':>8} {'x JSONL':>8} {'peak MB':>8}"
    )
    for name, (s, mb, steps) in results.items():
        print(
            f"{name:<12} {size[name] / 2**20:>10.1f} {steps:>9} {s:>8.2f} {s / anchor:>8.2f} {mb:>8.0f}"
        )
    if not args.keep:
        print(f"(logs in {root}; pass --keep DIR to reuse them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
