"""The quick-start script (``make demo``) writes a complete log and says where."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from dltop.probe.decoding import read_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_writes_a_log_and_prints_its_path(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "demos" / "quickstart.py"), "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    logs = list((tmp_path / "dltop-runs").glob("quickstart-*.jsonl"))
    assert len(logs) == 1
    rel = logs[0].relative_to(tmp_path)
    assert f"log written to {rel}" in out.stdout
    recs, dec = read_records(str(logs[0]))
    assert dec.malformed == 0
    kinds = [r["kind"] for r in recs]
    assert kinds[0] == "meta" and kinds.count("step") == 256 and "eval" in kinds
    steps = [r for r in recs if r["kind"] == "step"]
    assert all(r["grad_norm"] > 0 and r["batch_size"] == 64 and "data_time" in r for r in steps)
    assert recs[-1]["type"] == "exit" and recs[-1]["status"] == "ok"
    # each step's lr is the one that step trained with (probe.step() before sched.step())
    cosine = [1e-3 * (1 + math.cos(math.pi * i / 256)) for i in range(256)]
    assert steps[0]["lr"] == 2e-3
    assert [r["lr"] for r in steps] == pytest.approx(cosine, rel=1e-9, abs=1e-12)
