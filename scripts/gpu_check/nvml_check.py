"""nvml: the GPU panel's readings against nvidia-smi and torch, at the same moments.

The panel draws the ``sys`` records' ``gpus[i]`` fields, which the probe's sampler
thread takes with :meth:`SystemSampler.sample` (probe/system.py, NVML through
probe/nvml.py). Here that same ``sample()`` is called at five moments, each followed at
once by ``nvidia-smi --query-gpu`` (and ``--query-compute-apps`` for this process) and
``torch.cuda.memory_reserved()``:

1. idle, after a warm-up of the training;  2. with 1 GiB more held;  3. with 4 GiB more;
4. while the small GPT trains (work queued, the GPU busy);  5. after freeing the cache.

Checked (the part fails on these): the total memory (1 MiB, nvidia-smi's unit, plus
rounding), the used memory against nvidia-smi's (64 MiB or 2 %), and the used memory's
moves between moments against ``memory_reserved()``'s (64 MiB or 5 %): the panel must
see what the allocator holds. Reported only (sampled at different instants, or averaged
differently): utilisation (both > 0 under load), temperature, power. Where NVML's
``nvmlDeviceGetMemoryInfo`` v2 exists its ``used`` is reported beside v1's, the one the
panel uses: drivers since R510 count reserved memory differently in the two.

On the CPU: no NVML. The check is then that the probe says so cleanly: ``gpu_status()``
gives the one note the ``meta`` record carries, and a sampled ``sys`` record has no
``gpus`` at all (absent, never zero).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import torch
from dltop.probe import nvml
from dltop.probe.system import SystemSampler, gpu_status

from scripts.gpu_check.common import Outcome, main
from scripts.gpu_check.gpt import Trainer, config_for, make_batches

MIB = 1 << 20
GIB = 1 << 30
# the name last: it is the one field that could hold a comma
SMI_FIELDS = "index,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw,name"


def _num(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def smi(index: int) -> dict[str, Any]:
    """nvidia-smi's reading of GPU ``index`` (NVML's numbering) and this process's use."""
    out = subprocess.run(
        [
            "nvidia-smi",
            f"--query-gpu={SMI_FIELDS}",
            "--format=csv,noheader,nounits",
            "-i",
            str(index),
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout.strip()
    f = [s.strip() for s in out.splitlines()[0].split(",")]
    reading: dict[str, Any] = {
        "index": int(f[0]),
        "uuid": f[1],
        "mem_used": _num(f[2]),  # MiB
        "mem_total": _num(f[3]),
        "util": _num(f[4]),
        "temp": _num(f[5]),
        "power_w": _num(f[6]),
        "name": ",".join(f[7:]),
    }
    try:
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
        for row in apps.splitlines():
            cols = [c.strip() for c in row.split(",")]
            if len(cols) == 3 and cols[0] == str(os.getpid()) and cols[1] == f[1]:
                reading["process_used"] = _num(cols[2])
    except Exception as e:
        reading["process_used_error"] = f"{type(e).__name__}: {e}"[:200]
    return reading


def nvml_v2_used(session: nvml.Nvml, ordinal: int) -> int | None:
    """``used`` from ``nvmlDeviceGetMemoryInfo`` v2, where the bindings and driver have it."""
    try:
        lib = session._lib
        handle = session._handles[ordinal][1]
        version = getattr(lib, "nvmlMemory_v2", None)
        if version is None:
            return None
        return int(lib.nvmlDeviceGetMemoryInfo(handle, version=version).used)
    except Exception:
        return None


def moment(
    label: str, sampler: SystemSampler, session: nvml.Nvml, ordinal: int, nvml_index: int
) -> dict[str, Any]:
    rec = sampler.sample() or {}
    gpus = rec.get("gpus") or []
    panel: dict[str, Any] = next((g for g in gpus if g.get("index") == ordinal), {})
    row: dict[str, Any] = {
        "moment": label,
        "panel": {k: panel.get(k) for k in ("mem_used", "mem_total", "util", "temp", "power_w")},
        "panel_v2_used": nvml_v2_used(session, ordinal),
        "torch_reserved": torch.cuda.memory_reserved(ordinal),
        "torch_allocated": torch.cuda.memory_allocated(ordinal),
    }
    try:
        row["smi"] = smi(nvml_index)
    except Exception as e:
        row["smi_error"] = f"{type(e).__name__}: {e}"[:300]
    return row


def _nvml_index(session: nvml.Nvml, ordinal: int) -> int:
    """NVML's index of CUDA device ``ordinal`` (nvidia-smi -i takes NVML's numbering)."""
    try:
        return int(session._lib.nvmlDeviceGetIndex(session._handles[ordinal][1]))
    except Exception:
        return ordinal


def compare(rows: list[dict[str, Any]]) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(failures, soft differences, per-moment comparison table)."""
    fails: list[str] = []
    soft: list[str] = []
    table = []
    prev: dict[str, Any] | None = None
    for row in rows:
        p, s = row["panel"], row.get("smi")
        t: dict[str, Any] = {"moment": row["moment"]}
        if s is None or p.get("mem_used") is None:
            fails.append(f"{row['moment']}: no reading ({row.get('smi_error') or 'panel empty'})")
            table.append(t)
            continue
        used_mib, smi_used = p["mem_used"] / MIB, s["mem_used"]
        t.update(
            panel_used_mib=round(used_mib, 1),
            panel_v2_used_mib=(
                round(row["panel_v2_used"] / MIB, 1) if row["panel_v2_used"] is not None else None
            ),
            smi_used_mib=smi_used,
            reserved_mib=round(row["torch_reserved"] / MIB, 1),
            smi_process_mib=s.get("process_used"),
            panel_util=p.get("util"),
            smi_util=s.get("util"),
            panel_temp=p.get("temp"),
            smi_temp=s.get("temp"),
            panel_power_w=p.get("power_w"),
            smi_power_w=s.get("power_w"),
        )
        if p.get("mem_total") is not None and s.get("mem_total") is not None:
            diff = abs(p["mem_total"] / MIB - s["mem_total"])
            t["total_diff_mib"] = round(diff, 2)
            if diff > 2:
                fails.append(
                    f"{row['moment']}: total {p['mem_total'] / MIB:.0f} vs {s['mem_total']:.0f} MiB"
                )
        if smi_used is not None:
            diff = used_mib - smi_used
            t["used_diff_mib"] = round(diff, 1)
            if abs(diff) > max(64.0, 0.02 * smi_used):
                fails.append(
                    f"{row['moment']}: used {used_mib:.0f} MiB, nvidia-smi {smi_used:.0f} MiB"
                )
        proc = s.get("process_used")
        if proc is not None and row["torch_reserved"] / MIB > proc + 2:
            fails.append(f"{row['moment']}: reserved above this process's use in nvidia-smi")
        if prev is not None and prev.get("smi") is not None:
            moved = (p["mem_used"] - prev["panel"]["mem_used"]) / MIB
            reserved = (row["torch_reserved"] - prev["torch_reserved"]) / MIB
            t["used_moved_mib"], t["reserved_moved_mib"] = round(moved, 1), round(reserved, 1)
            if abs(moved - reserved) > max(64.0, 0.05 * abs(reserved)):
                fails.append(
                    f"{row['moment']}: used moved {moved:+.0f} MiB, reserved {reserved:+.0f} MiB"
                )
        if row["moment"] == "training" and not (
            (p.get("util") or 0) > 0 and (s.get("util") or 0) > 0
        ):
            soft.append(f"training: util panel {p.get('util')} %, nvidia-smi {s.get('util')} %")
        if (
            p.get("temp") is not None
            and s.get("temp") is not None
            and abs(p["temp"] - s["temp"]) > 3
        ):
            soft.append(f"{row['moment']}: temp {p['temp']} vs {s['temp']} C")
        pw, sw = p.get("power_w"), s.get("power_w")
        if pw is not None and sw is not None and abs(pw - sw) > max(30.0, 0.25 * sw):
            soft.append(f"{row['moment']}: power {pw:.0f} vs {sw:.0f} W")
        table.append(t)
        prev = row
    return fails, soft, table


def body_cuda(args: argparse.Namespace) -> Outcome:
    if not torch.cuda.is_available():
        return "fail", "--device cuda but torch sees no CUDA device", {}
    if shutil.which("nvidia-smi") is None:
        return "fail", "no nvidia-smi on PATH: nothing to compare the panel with", {}
    device = torch.device("cuda", torch.cuda.current_device())
    ordinal = device.index or 0
    torch.zeros(1, device=device)  # CUDA up
    session = nvml.Nvml()
    if not session.init():
        return "fail", f"NVML does not work on a GPU machine: {session.reason}", {}
    sampler = SystemSampler(lambda rec: None, nvml_session=session)
    sampler._setup()  # what the sampler thread does first; then sample() is its loop's body
    index = _nvml_index(session, ordinal)
    # the training first, so that its kernels and library handles are loaded (they grow
    # the context, which no allocator counter sees) before the first reading
    cfg = config_for("cuda")
    trainer = Trainer(cfg, device, "bf16")
    batches = make_batches(cfg, device)
    for i in range(20):
        trainer.step(*batches[i % len(batches)])
    torch.cuda.synchronize()
    rows = [moment("idle", sampler, session, ordinal, index)]
    held = [torch.empty(GIB, dtype=torch.uint8, device=device)]
    torch.cuda.synchronize()
    rows.append(moment("+1 GiB", sampler, session, ordinal, index))
    held.append(torch.empty(4 * GIB, dtype=torch.uint8, device=device))
    torch.cuda.synchronize()
    rows.append(moment("+4 GiB", sampler, session, ordinal, index))
    t_end = time.monotonic() + 1.5
    while time.monotonic() < t_end:  # a second and a half of steady load before reading
        trainer.step(*batches[0])
    for i in range(60):  # queued, not waited for: the GPU is busy during the readings
        trainer.step(*batches[i % len(batches)])
    rows.append(moment("training", sampler, session, ordinal, index))
    torch.cuda.synchronize()
    del held, trainer, batches
    torch.cuda.empty_cache()
    rows.append(moment("freed", sampler, session, ordinal, index))
    fails, soft, table = compare(rows)
    details = {
        "device": torch.cuda.get_device_name(device),
        "cuda_ordinal": ordinal,
        "nvml_index": index,
        "comparison": table,
        "moments": rows,
        "soft_differences": soft,
        "failures": fails,
    }
    t = {r["moment"]: r for r in table}
    worst = max((abs(r.get("used_diff_mib", 0)) for r in table), default=0)
    summary = (
        f"{len(rows)} moments; used vs nvidia-smi within {worst:.0f} MiB; "
        f"+4 GiB seen as {t.get('+4 GiB', {}).get('used_moved_mib')} MiB "
        f"(reserved {t.get('+4 GiB', {}).get('reserved_moved_mib')} MiB); "
        f"util under load {t.get('training', {}).get('panel_util')} % "
        f"(nvidia-smi {t.get('training', {}).get('smi_util')} %)"
    )
    if soft:
        summary += f"; {len(soft)} soft differences"
    if fails:
        return "fail", summary + " | " + " | ".join(fails[:3]), details
    return "pass", summary, details


def body_cpu(args: argparse.Namespace) -> Outcome:
    gpus, note = gpu_status()
    sampler = SystemSampler(lambda rec: None)
    sampler._setup()
    rec = sampler.sample() or {}
    details = {
        "gpus": gpus,
        "meta_note": note,
        "sys_record_fields": sorted(rec),
        "nvidia_smi": shutil.which("nvidia-smi"),
    }
    if gpus:
        return "fail", "NVML sees a GPU: run with --device cuda", details
    bad = []
    if not note or "N/A" not in note:
        bad.append(f"meta's note does not say GPU metrics are N/A: {note!r}")
    if "gpus" in rec:
        bad.append(f"a sys record without NVML has gpus: {rec['gpus']!r}")
    if "rss" not in rec:
        bad.append("a sys record without rss")
    if bad:
        return "fail", "; ".join(bad), details
    return "skip", f"no NVML here ({note}); sys records carry no gpus, as they must", details


def body(args: argparse.Namespace) -> Outcome:
    return body_cuda(args) if args.device == "cuda" else body_cpu(args)


if __name__ == "__main__":
    sys.exit(main("nvml", __doc__ or "", body))
