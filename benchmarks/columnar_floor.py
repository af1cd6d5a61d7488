"""What a columnar rules engine would cost before any rule: the floor under issue 11's target.

    .venv/bin/python benchmarks/columnar_floor.py [--steps 1000000] [--keep DIR]

Issue 11 asks ``dltop check`` on a 1 M-step log to take <= 3x the time msgspec takes to
decode the file, and proposes the way: decode into columns, run the rules over arrays
(numpy). Before rewriting thirteen rules, this measures, in one run on replay.py's log,
the parts such an engine cannot skip, each as a ratio to the anchor (a plain msgspec
line loop to dicts, replay.py's ``msgspec`` variant):

- ``dicts+columns``  decode each line to a dict (what every reader does now) and pull the
                     eight step fields the rules read into numpy columns, chunk by chunk
- ``struct+columns`` the cheapest decode we know: msgspec into a typed Struct (fields
                     the rules do not read are skipped by the decoder), then the same
                     columns
- ``windows``        the figures every rule reads at each 10-step block end: median and
                     16/84/90th percentiles of the last 100 losses and grad norms
                     (``rules/figures.py``), vectorised over all block ends at once

The floor is the decode+columns figure plus ``windows``. Whatever is left under 3x is the
budget for every rule's own logic (spikes, divergence, plateau, oscillation, data-bound,
stall, memory, layers, overfitting...). Each figure is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import generate_log  # noqa: E402 - the same log as replay.py's figures

FIELDS = ("step", "t", "loss", "grad_norm", "lr", "data_time", "step_time", "mem_allocated")
CHUNK_LINES = 65_536  # lines decoded before their columns are pulled (a reader's batch)
BLOCK = 10  # steps per block (rules/config.py general.block_steps)
WINDOW = 100  # the loss-spike and grad-explosion windows (rules/config.py)
TARGET = 3.0


class StepRow(msgspec.Struct):
    """The fields the rules read; a non-finite value is the string "NaN"/"Infinity"."""

    kind: str = ""
    step: int | None = None
    t: float | None = None
    loss: float | str | None = None
    grad_norm: float | str | None = None
    lr: float | str | None = None
    data_time: float | str | None = None
    step_time: float | str | None = None
    mem_allocated: int | float | None = None


def _lines(path: str) -> Any:
    with open(path, "rb") as f:
        chunk: list[bytes] = []
        for line in f:
            chunk.append(line)
            if len(chunk) >= CHUNK_LINES:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def _column(values: list[Any]) -> np.ndarray:
    """Floats, NaN for a missing or non-numeric value (what a columnar engine would hold)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array(
            [v if isinstance(v, int | float) else np.nan for v in values], dtype=np.float64
        )


def anchor(path: str) -> dict[str, np.ndarray]:
    decode = msgspec.json.Decoder().decode
    for chunk in _lines(path):
        for line in chunk:
            decode(line)
    return {}


def dict_columns(path: str) -> dict[str, np.ndarray]:
    decode = msgspec.json.Decoder().decode
    parts: dict[str, list[np.ndarray]] = {k: [] for k in FIELDS}
    for chunk in _lines(path):
        recs = [decode(line) for line in chunk]
        steps = [r for r in recs if r.get("kind") == "step"]
        for k in FIELDS:
            parts[k].append(_column([r.get(k) for r in steps]))
    return {k: np.concatenate(v) for k, v in parts.items()}


def struct_columns(path: str) -> dict[str, np.ndarray]:
    decode = msgspec.json.Decoder(StepRow).decode
    parts: dict[str, list[np.ndarray]] = {k: [] for k in FIELDS}
    for chunk in _lines(path):
        rows = [decode(line) for line in chunk]
        steps = [r for r in rows if r.kind == "step"]
        for k in FIELDS:
            parts[k].append(_column([getattr(r, k) for r in steps]))
    return {k: np.concatenate(v) for k, v in parts.items()}


def windows(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Median and 16/84/90th percentiles of the last WINDOW values at every block end."""
    out: dict[str, np.ndarray] = {}
    for key in ("loss", "grad_norm"):
        x = cols[key]
        x = x[np.isfinite(x)]
        if len(x) < WINDOW:
            continue
        ends = np.arange(WINDOW, len(x) + 1, BLOCK)
        rows = sliding_window_view(x, WINDOW)[ends - WINDOW]
        kth = [16, 49, 50, 84, 89]
        part = np.partition(rows, kth, axis=1)
        out[key + "_median"] = 0.5 * (part[:, 49] + part[:, 50])
        out[key + "_p16"], out[key + "_p84"] = part[:, 16], part[:, 84]
        out[key + "_p90"] = part[:, 89]
    return out


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--keep", default="", help="write/reuse the log in this directory")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(args.keep or tmp, f"bench-{args.steps}.jsonl")
        if not os.path.exists(path):
            generate_log(path, args.steps)
        print(f"log: {path} ({os.path.getsize(path) / 1e6:.0f} MB), {os.cpu_count()} CPUs")
        base, _ = best(lambda: anchor(path), args.repeat)
        t_dict, cols = best(lambda: dict_columns(path), args.repeat)
        t_struct, cols2 = best(lambda: struct_columns(path), args.repeat)
        assert all(np.array_equal(cols[k], cols2[k], equal_nan=True) for k in FIELDS)
        t_win, _ = best(lambda: windows(cols), args.repeat)
    steps = len(cols["step"])
    print(f"{steps} step records; anchor (msgspec decode to dicts): {base:.2f} s")
    rows = [
        ("dicts+columns", t_dict),
        ("struct+columns", t_struct),
        ("windows", t_win),
        ("floor (dicts)", t_dict + t_win),
        ("floor (struct)", t_struct + t_win),
    ]
    for name, t in rows:
        print(f"  {name:15} {t:6.2f} s  {t / base:5.2f}x")
    for name, t in rows[-2:]:
        left = TARGET * base - t
        per_step = 1e6 * left / max(1, steps)
        print(
            f"{name}: left for every rule's own logic at {TARGET:.0f}x: {left:.2f} s "
            f"({per_step:.2f} us per step)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
