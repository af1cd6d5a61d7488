"""cuda_tests: the test suite's CUDA tests, on the GPU.

``tests/probe/test_probe_cuda.py`` (training under ``set_sync_debug_mode("error")``, a CUDA
tensor lr, CUDA extras, sparse gradients, fp16 with a GradScaler) and
``tests/probe/test_probe_devices.py`` (the GPU-path decisions with stand-ins, run here too).
Every test of the first file skips without CUDA: on the CPU this part says so and
passes as ``skip`` when nothing failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

from scripts.gpu_check.common import ROOT, Outcome, main

FILES = ("tests/probe/test_probe_cuda.py", "tests/probe/test_probe_devices.py")


def body(args: argparse.Namespace) -> Outcome:
    xml = args.out / "cuda_tests.xml"
    xml.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         f"--junitxml={xml}", *FILES],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
    if not xml.is_file():
        return "fail", f"pytest wrote no report (exit {done.returncode})", {"output": tail}
    suite = ET.parse(xml).getroot()
    if suite.tag != "testsuite":  # <testsuites><testsuite>...
        inner = suite.find("testsuite")
        suite = inner if inner is not None else suite
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    cases: list[dict[str, Any]] = []
    for case in suite.iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = tag
                cases.append({"test": case.get("name"), "outcome": outcome,
                              "message": (child.get("message") or "")[:300]})  # fmt: skip
                break
        else:
            cases.append({"test": case.get("name"), "outcome": outcome})
    cuda_ran = sum(1 for c in cases if c["outcome"] == "passed" and c["test"] in _cuda_names(suite))
    details = {"exit": done.returncode, "counts": counts, "cases": cases, "output": tail}
    ran = counts["tests"] - counts["skipped"]
    summary = (
        f"{ran - counts['failures'] - counts['errors']} passed, {counts['failures']} failed, "
        f"{counts['errors']} errors, {counts['skipped']} skipped of {counts['tests']} "
        f"({cuda_ran} of them in test_probe_cuda.py on the GPU)"
    )
    if counts["failures"] or counts["errors"] or done.returncode not in (0, 5):
        return "fail", summary, details
    if args.device == "cuda" and cuda_ran == 0:
        return "fail", summary + " | no CUDA test ran on a CUDA machine", details
    if args.device == "cpu":
        return "skip", summary + " (no CUDA here)", details
    return "pass", summary, details


def _cuda_names(suite: ET.Element) -> set[str]:
    return {
        str(c.get("name"))
        for c in suite.iter("testcase")
        if str(c.get("classname", "")).endswith("test_probe_cuda")
    }


if __name__ == "__main__":
    sys.exit(main("cuda_tests", __doc__ or "", body))
