"""oom: a real out-of-memory, the ``oom`` demo, and what dltop makes of it.

Runs ``python -m dltop.demos.oom --device cuda --fast`` (the batch doubles every 4
steps under a 768 MiB cap the demo sets on itself with
``torch.cuda.set_per_process_memory_fraction``, until the caching allocator gives out:
a real ``torch.OutOfMemoryError``). On the CPU the demo's own CPU path runs instead (an
``RLIMIT_AS`` cap, a real ``DefaultCPUAllocator`` failure; Linux only). Then checks:

- the demo exited with an error, and its log has the ``oom`` event with the allocator's
  state (GPU: ``device: cuda`` with ``allocated``, ``reserved``, ``max_allocated``,
  ``free``, ``total``, ``requested``; CPU: ``rss`` and ``requested``);
- GPU: the steps' ``mem_limit`` is the 768 MiB cap, not the card's memory;
- ``dltop check --json``: an ``oom`` alert, critical, from the crash catalogue's
  ``cuda_oom`` pattern (CPU: ``cpu_oom``), with its checklist (``oom`` / ``oom_cpu``) and
  the marks the run's evidence gives (GPU: not on the first step, the batch grew; CPU:
  no huge request);
- the crash banner (``crash_view.crash_info``, what the viewer shows): its diagnosis is
  the catalogue's title ("GPU out of memory" / "Out of host memory").

The demo's log is kept as ``oom.jsonl`` beside the part's result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from scripts.gpu_check.common import ROOT, Outcome, main

CAP = 768 << 20
EXPECT: dict[str, dict[str, Any]] = {
    "cuda": {
        "pattern": "cuda_oom",
        "checklist": "oom",
        "marks": {"first_steps": "no", "batch_grew": "yes"},
        "banner": "GPU out of memory",
        "memory": ("allocated", "reserved", "max_allocated", "free", "total", "requested"),
    },
    "cpu": {
        "pattern": "cpu_oom",
        "checklist": "oom_cpu",
        # "growth" needs sys records (1 Hz) before the crash: yes or unknown, by speed
        "marks": {"huge_request": "no"},
        "banner": "Out of host memory",
        "memory": ("rss", "requested"),
    },
}


def body(args: argparse.Namespace) -> Outcome:
    device = args.device
    if device == "cpu" and not sys.platform.startswith("linux"):
        return "skip", "the oom demo's CPU path needs Linux (RLIMIT_AS)", {}
    log = args.out / "oom.jsonl"
    log.unlink(missing_ok=True)
    demo = subprocess.run(
        [sys.executable, "-m", "dltop.demos.oom", "--device", device, "--fast", "--out", str(log)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=ROOT,
    )
    tail = (demo.stdout + demo.stderr).strip().splitlines()[-1:] or [""]
    details: dict[str, Any] = {"demo_exit": demo.returncode, "demo_last_line": tail[0][:300]}
    if not log.is_file():
        return "fail", f"the demo wrote no log (exit {demo.returncode}): {tail[0][:200]}", details

    from dltop.probe.decoding import read_records
    from dltop.tui.core.present.crash_view import crash_info
    from dltop.tui.core.store.run import RunModel

    expect = EXPECT[device]
    recs, _ = read_records(str(log))
    events = [r for r in recs if r.get("type") == "oom"]
    steps = [r for r in recs if r.get("kind") == "step"]
    got = events[0].get("memory") if events else None
    mem: dict[str, Any] = got if isinstance(got, dict) else {}
    details.update(
        steps=len(steps),
        last_batch_size=steps[-1].get("batch_size") if steps else None,
        oom_memory=mem,
        oom_message=(str(events[0].get("message", ""))[:400] if events else None),
        mem_limit=sorted({v for s in steps if type(v := s.get("mem_limit")) is int}),
    )
    bad = []
    if demo.returncode == 0:
        bad.append("the demo exited 0: no out-of-memory")
    if not events:
        bad.append("no oom event in the log")
    if mem.get("device") != device:
        bad.append(f"oom memory device {mem.get('device')!r}, not {device}")
    missing = [k for k in expect["memory"] if k not in mem]
    if missing:
        bad.append(f"the allocator's state lacks {', '.join(missing)}")
    if device == "cuda":
        limits = details["mem_limit"]
        if not limits or any(abs(v - CAP) > 2 << 20 for v in limits):
            bad.append(f"mem_limit {limits} is not the 768 MiB cap")

    check = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    details["check_exit"] = check.returncode
    try:
        report = json.loads(check.stdout)
    except ValueError:
        report = {}
        bad.append(f"dltop check gave no JSON (exit {check.returncode}): {check.stderr[-200:]}")
    details["verdict"] = report.get("verdict")
    oom = [a for a in report.get("alerts", []) if a.get("id") == "oom"]
    marks: dict[str, Any] = {}
    if not oom:
        bad.append(f"no oom alert: {[a.get('id') for a in report.get('alerts', [])]}")
    else:
        a = oom[0]
        marks = {s["id"]: s.get("mark") for s in a.get("checklist", [])}
        details.update(
            alert_severity=a.get("severity"),
            pattern=a.get("evidence", {}).get("pattern"),
            checklist_id=a.get("checklist_id"),
            checklist_marks=marks,
            checklist_evidence={
                s["id"]: s.get("evidence") for s in a.get("checklist", []) if s.get("evidence")
            },
        )
        if a.get("severity") != "critical":
            bad.append(f"oom alert is {a.get('severity')}, not critical")
        if details["pattern"] != expect["pattern"]:
            bad.append(f"pattern {details['pattern']!r}, not {expect['pattern']}")
        if a.get("checklist_id") != expect["checklist"]:
            bad.append(f"checklist {a.get('checklist_id')!r}, not {expect['checklist']}")
        for step, mark in expect["marks"].items():
            if marks.get(step) != mark:
                bad.append(f"checklist mark {step}={marks.get(step)!r}, expected {mark!r}")

    model = RunModel("oom")
    model.ingest(recs)
    model.finish()
    info = crash_info(model)
    details["banner"] = (
        {"exception": info.exception[:300], "diagnosis": info.diagnosis, "summary": info.summary,
         "hint": info.hint, "step": info.step}
        if info is not None else None
    )  # fmt: skip
    if info is None:
        bad.append("no crash banner")
    elif info.diagnosis != expect["banner"]:
        bad.append(f"banner diagnosis {info.diagnosis!r}, not {expect['banner']!r}")

    requested = mem.get("requested")
    yes = sorted(k for k, v in marks.items() if v == "yes")
    summary = (
        f"{'torch.OutOfMemoryError' if device == 'cuda' else 'CPU allocator failure'} at step "
        f"{len(steps) - 1 if steps else '?'} (batch {details['last_batch_size']}, asked "
        f"{(requested or 0) / (1 << 20):.0f} MiB); banner: {details['banner'] and details['banner']['diagnosis']}; "
        f"checklist {details.get('checklist_id')} marks yes: {', '.join(yes) or 'none'}"
    )
    if bad:
        return "fail", summary + " | " + "; ".join(bad[:4]), details | {"failures": bad}
    return "pass", summary, details


if __name__ == "__main__":
    sys.exit(main("oom", __doc__ or "", body))
