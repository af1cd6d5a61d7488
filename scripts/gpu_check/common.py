"""What every part of the GPU check shares: its command line, its result file, its line."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STATUSES = ("pass", "fail", "skip")
Outcome = tuple[str, str, dict[str, Any]]  # status, one-line summary, details


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def parse_args(part: str, doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m scripts.gpu_check.{part}", description=doc)
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="cuda: the GPU check; cpu: its fallback (default: cuda when torch sees one)",
    )
    parser.add_argument("--out", default="gpu-check-out/work", help="folder for <part>.json")
    parser.add_argument("--steps", type=int, default=None, help="fewer or more steps")
    args = parser.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if cuda_available() else "cpu"
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def clean(value: Any) -> Any:
    """JSON-safe: non-finite floats as strings ("nan", "inf"), tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def write_result(
    out: Path, part: str, device: str, outcome: Outcome, seconds: float
) -> dict[str, Any]:
    status, summary, details = outcome
    assert status in STATUSES, status
    result = {
        "part": part,
        "status": status,
        "summary": summary,
        "device": device,
        "seconds": round(seconds, 1),
        "details": clean(details),
    }
    path = out / f"{part}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, path)
    return result


def line(part: str, status: str, summary: str) -> str:
    """The one line a part prints last, and the script echoes."""
    return f"gpu_check {part}: {status.upper()} — {summary}"


def main(
    part: str,
    doc: str,
    body: Callable[[argparse.Namespace], Outcome],
    argv: list[str] | None = None,
) -> int:
    """Run one part: its result file is written whatever happens (a crash is a failure
    with the traceback's tail in its details); exit status 1 only for a failure."""
    args = parse_args(part, doc, argv)
    t0 = time.monotonic()
    try:
        outcome = body(args)
    except Exception as e:
        tb = traceback.format_exc().splitlines()[-12:]
        outcome = ("fail", f"crashed: {type(e).__name__}: {str(e)[:200]}", {"traceback": tb})
    result = write_result(args.out, part, args.device, outcome, time.monotonic() - t0)
    sys.stdout.flush()
    print(line(part, result["status"], result["summary"]), flush=True)
    return 1 if result["status"] == "fail" else 0


def rel_err(a: float, b: float) -> float:
    """Relative difference, 0 for two equal non-finite values, inf for one non-finite."""
    if not (math.isfinite(a) and math.isfinite(b)):
        same = (math.isnan(a) and math.isnan(b)) or a == b
        both_bad = not math.isfinite(a) and not math.isfinite(b)
        return 0.0 if same or both_bad else math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return math.nan
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
