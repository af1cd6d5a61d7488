"""What the adapter tests share: reading a log, and ``dltop check --json`` with thresholds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.adapter import Session
from dltop.probe.decoding import read_records

ROOT = Path(__file__).resolve().parents[1]

# a stall at 0.4 s instead of 60 s, from the first step on: the tests' trainings are short
FAST_STALL = [
    "--set", "stall.floor_s=0.4", "--set", "stall.critical_floor_s=0.8",
    "--set", "stall.startup_s=0", "--set", "stall.phase_floor_s=30",
]  # fmt: skip


def records(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    recs, dec = read_records(str(path))
    assert dec.malformed == 0
    return [r for r in recs if kind is None or r["kind"] == kind]


def events(path: Path, typ: str) -> list[dict[str, Any]]:
    return [r for r in records(path, "event") if r.get("type") == typ]


def check(source: Path, *extra: str) -> dict[str, Any]:
    """``dltop check SOURCE --json [extra...]`` in a subprocess; the parsed report."""
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", os.fspath(source), "--json", *extra],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode in (0, 1, 2), done.stderr
    return json.loads(done.stdout)


def alert_ids(report: dict[str, Any]) -> list[str]:
    return sorted(a["id"] for a in report["alerts"])


def assert_phases_are_never_stalls(
    run: Callable[[Path, Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run(log, tmp_path)`` trains with slow evaluations and a slow checkpoint save: they
    are ``eval`` and ``checkpoint`` phases and no stall; without the adapter's phases (the
    control, which proves the thresholds would catch them) the same training is a stall."""
    log = tmp_path / "run.jsonl"
    run(log, tmp_path)
    names = {(p["name"], p["state"]) for p in events(log, "phase")}
    assert names == {
        ("eval", "begin"),
        ("eval", "end"),
        ("checkpoint", "begin"),
        ("checkpoint", "end"),
    }
    assert "stall" not in alert_ids(check(log, *FAST_STALL))
    monkeypatch.setattr(Session, "begin_phase", lambda self, name: None)
    monkeypatch.setattr(Session, "end_phase", lambda self: None)
    bare = tmp_path / "bare.jsonl"
    run(bare, tmp_path)
    assert not events(bare, "phase")
    assert "stall" in alert_ids(check(bare, *FAST_STALL))


def blocked_import(module: str, package: str) -> subprocess.CompletedProcess[str]:
    """Import ``module`` in a fresh interpreter where ``package`` is missing."""
    code = (
        "import sys\n"
        f"sys.modules[{package!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
        "    print('cause', e.__cause__, e.__suppress_context__)\n"
        "else:\n"
        "    print('imported')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT / "tests"
    )
