"""Logs for the app tests, written with the real schema encoder, with fixed timestamps.

Imported by the Pilot and snapshot tests, and run as a script by them as the REAL writer
subprocess that appends to a log while the app follows it:

    python tests/app/test_app_support.py PATH SCENARIO [--steps N] [--rate HZ] [--start K]

Timestamps are fixed (``T0 + step * DT``) so that snapshots never depend on the clock;
the app is given ``now = end time + a few seconds`` for the same reason.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dltop.probe.encoding import encode_record

T0 = 1_700_000_000.0
DT = 0.1  # seconds per step
SCENARIOS = ("healthy", "nan", "data_bound", "crashed", "gpu", "killed", "blowup")
SCRIPT = str(Path(__file__).resolve())


def meta(gpu: bool = False) -> dict[str, Any]:
    devices: list[dict[str, Any]]
    notes: list[str] = []
    if gpu:
        devices = [{"type": "cuda", "index": 0, "name": "Test GPU", "mem_total": 16 * 2**30}]
    else:
        devices = [{"type": "cpu", "cpus": 2}]
        notes.append("no NVIDIA GPU: NVML Shared Library Not Found; GPU metrics are N/A")
    return {
        "kind": "meta", "v": 1, "run_id": "demo-run", "t": T0, "host": "testhost", "pid": 4242,
        "argv": ["train.py"], "devices": devices, "rank": 0, "world_size": 1, "notes": notes,
    }  # fmt: skip


def step(i: int, scenario: str) -> dict[str, Any]:
    """One step record; the scenario shapes loss, timings and memory."""
    loss = 2.5 * math.exp(-i / 150) + 0.3 + 0.05 * math.sin(i / 3)
    gn = 1.0 + 0.3 * math.cos(i / 5)
    step_time = DT
    data_time = 0.004 + 0.001 * (i % 3)
    if scenario == "data_bound":
        data_time = 0.065 + 0.002 * (i % 4)
    rec: dict[str, Any] = {
        "kind": "step", "step": i, "t": T0 + (i + 1) * DT, "loss": loss, "grad_norm": gn,
        "lr": 1e-3 * min(1.0, (i + 1) / 20), "data_time": data_time, "step_time": step_time,
        "compute_time": step_time - data_time, "batch_size": 32, "samples_per_s": 32 / step_time,
    }  # fmt: skip
    if scenario == "gpu":
        rec["mem_allocated"] = 2 * 2**30 + i * 2**20
        rec["mem_reserved"] = 3 * 2**30
        rec["mem_limit"] = 16 * 2**30
    if scenario == "blowup" and i > BLOWUP_STEP:  # the lr is too high from here: x1.6 a step
        rec["loss"] = step(BLOWUP_STEP, "healthy")["loss"] * 1.6 ** (i - BLOWUP_STEP)
        rec["grad_norm"] = gn * 1.5 ** (i - BLOWUP_STEP)
    if scenario == "nan" and i >= NAN_STEP:
        rec["loss"] = math.nan
        rec["grad_norm"] = math.inf if i == NAN_STEP else math.nan
    return rec


NAN_STEP = 240
BLOWUP_STEP = 150  # "blowup": healthy until here, then 1.5 -> 1e35 (the NaN demo's shape)


def sys_rec(i: int, scenario: str) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "kind": "sys", "t": T0 + (i + 1) * DT, "rss": 900 * 2**20 + i * 2**16,
        "cpu_percent": 95.0, "mem_total": 8 * 2**30, "mem_available": 4 * 2**30,
    }  # fmt: skip
    if scenario == "gpu":
        rec["gpus"] = [{"index": 0, "name": "Test GPU", "util": 80.0 + (i % 7),
                        "mem_used": 3 * 2**30, "mem_total": 16 * 2**30}]  # fmt: skip
    return rec


def records(
    scenario: str, steps: int, start: int = 0, with_meta: bool = True
) -> Iterator[dict[str, Any]]:
    """The scenario's records for steps ``start..start+steps-1`` (plus its ending)."""
    if with_meta:
        yield meta(gpu=scenario == "gpu")
    for i in range(start, start + steps):
        yield step(i, scenario)
        if i % 10 == 9:
            yield sys_rec(i, scenario)
        if i % 100 == 99:
            yield {
                "kind": "eval",
                "step": i,
                "t": T0 + (i + 1) * DT,
                "loss": 0.1 + step(i, "healthy")["loss"],
            }
    end = start + steps
    if scenario == "crashed":
        yield {
            "kind": "event", "type": "exception", "t": T0 + end * DT + 0.05, "step": end - 1,
            "exc_type": "RuntimeError",
            "message": "mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)",
            "traceback": ['  File "train.py", line 42, in <module>\n    out = model(x)\n'],
        }  # fmt: skip
        yield {"kind": "event", "type": "exit", "status": "exception", "t": T0 + end * DT + 0.06}
    if scenario == "killed":  # a scheduler's SIGTERM: the probe records it, then dies by it
        t = T0 + end * DT + 0.05
        yield {"kind": "event", "type": "signal", "signal": "SIGTERM", "t": t, "step": end - 1}
        yield {"kind": "event", "type": "exit", "status": "signal", "t": t + 0.01}


def extras_log(path: Path, steps: int = 300) -> Path:
    """The healthy scenario with what people log beyond the basics: ``acc`` and
    ``tokens_seen`` every step, an eval of ``acc`` and ``f1`` every 50 steps."""
    import json

    with open(path, "w") as f:
        for rec in records("healthy", steps):
            if rec["kind"] == "step":
                rec["acc"] = 0.5 + 0.4 * (1 - math.exp(-rec["step"] / 80))
                rec["tokens_seen"] = 1000 * rec["step"]
            f.write(json.dumps(rec) + "\n")
            if rec["kind"] == "step" and rec["step"] % 50 == 49:
                ev = {"kind": "eval", "step": rec["step"], "t": rec["t"], "acc": 0.45, "f1": 0.3}
                f.write(json.dumps(ev) + "\n")
    return path


def end_time(steps: int) -> float:
    return T0 + steps * DT


def screen_text(app: Any) -> str:
    """What the terminal shows, as plain text (Pilot tests assert on it)."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system=None, record=True, legacy_windows=False)  # fmt: skip
    console.print(
        app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    )
    return console.export_text()


def write_log(path: Path, scenario: str, steps: int) -> Path:
    with open(path, "wb") as f:
        for rec in records(scenario, steps):
            f.write(encode_record(rec))
    return path


def append_slowly(
    path: str, scenario: str, steps: int, rate: float, start: int, hold: tuple[int, str] | None
) -> None:
    """The writer subprocess: append ``steps`` steps at ``rate`` per second, flushing each.
    ``hold`` (step, file): after that step, wait (60 s at most) until the file exists, so a
    test sees the run growing however loaded the machine is."""
    with open(path, "ab") as f:
        for rec in records(scenario, steps, start=start, with_meta=start == 0):
            f.write(encode_record(rec))
            if rec["kind"] == "step":
                f.flush()
                os.fsync(f.fileno()) if rate < 50 else None
                time.sleep(1.0 / rate)
                if hold is not None and rec["step"] == hold[0]:
                    deadline = time.monotonic() + 60
                    while not os.path.exists(hold[1]) and time.monotonic() < deadline:
                        time.sleep(0.02)


def test_scenarios_are_deterministic_and_end_as_they_say(tmp_path: Path) -> None:
    a = write_log(tmp_path / "a.jsonl", "crashed", 30).read_bytes()
    b = write_log(tmp_path / "b.jsonl", "crashed", 30).read_bytes()
    assert a == b
    lines = a.splitlines()
    assert b'"kind":"meta"' in lines[0] and b'"type":"exit"' in lines[-1]
    nan = write_log(tmp_path / "n.jsonl", "nan", NAN_STEP + 2).read_bytes()
    assert nan.count(b'"NaN"') >= 2 and b'"Infinity"' in nan


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("scenario", choices=SCENARIOS)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--hold", nargs=2, metavar=("STEP", "FILE"), default=None)
    a = ap.parse_args()
    hold = (int(a.hold[0]), a.hold[1]) if a.hold else None
    append_slowly(a.path, a.scenario, a.steps, a.rate, a.start, hold)
    sys.exit(0)
