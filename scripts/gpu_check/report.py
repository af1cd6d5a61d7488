"""report: the parts' results as ``gpu_check.json`` and a Markdown summary, ``gpu_check.md``.

    python -m scripts.gpu_check.report --work WORK --out OUT --device cuda|cpu

reads ``WORK/<part>.json`` for each part, ``WORK/status.tsv`` (``part, exit status,
seconds, time limit, note`` per line, written by scripts/gpu_check.sh) and
``WORK/setup.txt`` (what the set-up did), adds the environment (device, driver, CUDA,
torch, date), and writes both files to OUT. A part with no result file is a failure,
with its exit status and whether it ran out of time. Exit 0 when no part failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from scripts.gpu_check.common import clean

PARTS = ("cuda_tests", "nosync", "cost", "nvml", "oom", "adapters")
TIMED_OUT = (124, 137)


def environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device_kind": device,
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["cudnn"] = (
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        )
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["device"] = p.name
            env["device_memory_gib"] = round(p.total_memory / 2**30, 1)
            env["device_count"] = torch.cuda.device_count()
            env["compute_capability"] = f"{p.major}.{p.minor}"
    except Exception as e:
        env["torch_error"] = f"{type(e).__name__}: {e}"[:200]
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()  # fmt: skip
        env["driver"] = out[0].split(",")[0].strip() if out else None
    except Exception:
        env["driver"] = None
    if "device" not in env:
        env["device"] = _cpu_name()
    return env


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                if row.startswith("model name"):
                    return f"{row.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or 'CPU'} ({os.cpu_count()} CPUs)"


def read_status(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for row in path.read_text().splitlines():
        cols = row.split("\t")
        if len(cols) >= 4:
            out[cols[0]] = {
                "exit": int(cols[1]),
                "wall_s": int(cols[2]),
                "limit_s": int(cols[3]),
                "note": cols[4] if len(cols) > 4 else "",
            }
    return out


def gather(work: Path, device: str) -> dict[str, Any]:
    status = read_status(work / "status.tsv")
    # the parts the script ran, in its order; then any result without a line of its own
    names = list(status) + [p for p in PARTS if p not in status and (work / f"{p}.json").is_file()]
    results: dict[str, Any] = {}
    for name in names:
        st = status.get(name)
        path = work / f"{name}.json"
        if path.is_file():
            r = json.loads(path.read_text())
        elif st is not None and st["note"]:  # not run (the budget was spent): not checked
            r = {"part": name, "status": "fail", "summary": st["note"], "details": {}}
        else:
            assert st is not None
            why = f"no result (exit {st['exit']}"
            if st["exit"] in TIMED_OUT:
                why += f", killed at its {st['limit_s']} s limit"
            r = {"part": name, "status": "fail", "summary": why + ")", "details": {}}
        if st is not None:
            r["exit"], r["wall_s"], r["limit_s"] = st["exit"], st["wall_s"], st["limit_s"]
            r["timed_out"] = st["exit"] in TIMED_OUT
        results[name] = r
    counts = {
        s: sum(1 for r in results.values() if r["status"] == s) for s in ("pass", "fail", "skip")
    }
    setup_file = work / "setup.txt"
    setup = setup_file.read_text().splitlines() if setup_file.is_file() else []
    setup_failed = any(row.startswith("FAIL:") for row in setup)
    return {
        "schema": 1,
        "check": "dltop GPU check (issue 34): scripts/gpu_check.sh",
        "device": device,
        "env": environment(device),
        "setup": setup,
        "ok": counts["fail"] == 0 and bool(results) and not setup_failed,
        "counts": counts,
        "parts": results,
    }


# --- Markdown ---------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def markdown(doc: dict[str, Any]) -> str:
    env, parts = doc["env"], doc["parts"]
    c = doc["counts"]
    lines = [
        "# dltop GPU check",
        "",
        f"**{'PASS' if doc['ok'] else 'FAIL'}**: {c['pass']} passed, {c['fail']} failed, "
        f"{c['skip']} skipped. Device kind: `{doc['device']}`.",
        "",
    ]
    lines += _table(
        ["device", "driver", "CUDA", "torch", "python", "date"],
        [[env.get("device"), env.get("driver"), env.get("cuda"), env.get("torch"),
          env.get("python"), env.get("date")]],
    )  # fmt: skip
    if doc["setup"]:
        lines += ["Set-up: " + "; ".join(doc["setup"]), ""]
    lines += _table(
        ["part", "status", "seconds", "summary"],
        [[n, r["status"].upper(), r.get("wall_s", r.get("seconds")), r["summary"]] for n, r in parts.items()],
    )  # fmt: skip
    for name, r in parts.items():
        d = r.get("details") or {}
        section = _SECTIONS.get(name)
        if section is not None and d:
            try:
                lines += section(d)
            except Exception as e:  # a result of an unexpected shape: said, not fatal
                lines += [f"({name}: details not tabulated: {type(e).__name__}: {e})", ""]
    return "\n".join(lines).rstrip() + "\n"


def _nosync(d: dict[str, Any]) -> list[str]:
    out = ["## No sync", "", f"Mode: {d.get('mode')}.", ""]
    rows = [
        [r["precision"], r["steps"], r["probe_syncs"], r["user_syncs"],
         f"{r['deliberate_user_syncs']}/{r['expected_user_syncs']}", r.get("cpu_branch_reads"),
         r["grad_norm_max_rel_err"], r["overflow_steps"], "ok" if r["ok"] else "; ".join(r["why"])]
        for r in d.get("runs", [])
    ]  # fmt: skip
    out += _table(
        ["precision", "steps", "probe syncs", "training's own syncs", "deliberate seen",
         "CPU-branch reads", "grad norm rel err", "overflow steps", "result"],
        rows,
    )  # fmt: skip
    t = d.get("selftest") or {}
    out += [
        f"Self-test: {t.get('caught_as_probe')} of {t.get('planted')} planted syncs seen as the "
        f"probe's ({t.get('planted_step_path')} in the step path, {t.get('planted_hooks')} in "
        "the backward hooks).",
        "",
    ]
    for r in d.get("runs", []):
        if r.get("user_sync_sites"):
            sites = "; ".join(f"{k}: {v}" for k, v in r["user_sync_sites"].items())
            out += [f"- {r['precision']}, the training's own: {sites}"]
        if r.get("probe_sync_sites"):
            sites = "; ".join(f"{k}: {v}" for k, v in r["probe_sync_sites"].items())
            out += [f"- {r['precision']}, **the probe's**: {sites}"]
    return out + [""]


def _cost(d: dict[str, Any]) -> list[str]:
    variants = d.get("variants", [])
    out = ["## Cost per step", "", f"Model: {d.get('config')}. {d.get('note', '')}.", ""]
    rows = []
    for r in d.get("results", []):
        for v in variants:
            over = r["overhead_pct"].get(v)
            rows.append(
                [r["precision"], v, r["ms_per_step"][v],
                 "—" if over is None else f"{over:+.1f} %", r["none_spread_pct"]]
            )  # fmt: skip
    out += _table(["precision", "logging", "ms/step (median)", "overhead", "none's spread %"], rows)
    if d.get("skipped"):
        out += [f"Skipped: {d['skipped']}", ""]
    return out


def _nvml(d: dict[str, Any]) -> list[str]:
    if "comparison" not in d:
        return [
            "## NVML",
            "",
            f"No NVML: {d.get('meta_note')}; sys fields {d.get('sys_record_fields')}.",
            "",
        ]
    keys = ["moment", "panel_used_mib", "panel_v2_used_mib", "smi_used_mib", "used_diff_mib",
            "reserved_mib", "used_moved_mib", "reserved_moved_mib", "smi_process_mib",
            "panel_util", "smi_util", "panel_temp", "smi_temp", "panel_power_w", "smi_power_w"]  # fmt: skip
    out = ["## NVML against nvidia-smi and torch", ""]
    out += _table(keys, [[row.get(k) for k in keys] for row in d["comparison"]])
    for k in ("failures", "soft_differences"):
        if d.get(k):
            out += [f"{k.replace('_', ' ').capitalize()}: " + "; ".join(d[k]), ""]
    return out


def _oom(d: dict[str, Any]) -> list[str]:
    banner = d.get("banner") or {}
    out = ["## Out of memory (the oom demo)", ""]
    out += [
        f"- demo exit {d.get('demo_exit')}, {d.get('steps')} steps, last batch "
        f"{d.get('last_batch_size')}; `mem_limit` {d.get('mem_limit')}",
        f"- allocator state in the log: {d.get('oom_memory')}",
        f"- `dltop check`: {d.get('alert_severity')} `oom`, pattern `{d.get('pattern')}`, "
        f"checklist `{d.get('checklist_id')}`; verdict: {d.get('verdict')}",
        f"- checklist marks: {d.get('checklist_marks')}",
        f"- crash banner: {banner.get('diagnosis')} — {banner.get('summary')}",
        "",
    ]
    return out


def _adapters(d: dict[str, Any]) -> list[str]:
    rows = []
    for name, r in d.items():
        if "skipped" in r:
            rows.append([name, "–", "–", "–", "–", "–", "skipped: " + r["skipped"]])
            continue
        rows.append(
            [name, r.get("precision"), r.get("steps_logged"), r.get("grad_norm_max_rel_err"),
             r.get("overflow_steps"), r.get("config_amp"), "ok" if r.get("ok") else "; ".join(r.get("why", []))]
        )  # fmt: skip
    return ["## Adapters under AMP", ""] + _table(
        ["framework", "precision", "steps", "grad norm rel err", "overflow steps", "config amp", "result"],
        rows,
    )  # fmt: skip


def _cuda_tests(d: dict[str, Any]) -> list[str]:
    rows = [[c["test"], c["outcome"], c.get("message", "")] for c in d.get("cases", [])]
    return ["## CUDA tests", ""] + _table(["test", "outcome", "message"], rows)


_SECTIONS = {
    "cuda_tests": _cuda_tests,
    "nosync": _nosync,
    "cost": _cost,
    "nvml": _nvml,
    "oom": _oom,
    "adapters": _adapters,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.gpu_check.report", description=__doc__)
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = clean(gather(Path(args.work), args.device))
    (out / "gpu_check.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "gpu_check.md").write_text(markdown(doc))
    c = doc["counts"]
    print(
        f"gpu_check: {'PASS' if doc['ok'] else 'FAIL'} — {c['pass']} passed, {c['fail']} failed, "
        f"{c['skip']} skipped on {doc['env'].get('device')} "
        f"(torch {doc['env'].get('torch')}, CUDA {doc['env'].get('cuda')}, driver "
        f"{doc['env'].get('driver')}); {out / 'gpu_check.md'}"
    )
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
