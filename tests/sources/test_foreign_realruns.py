"""Every real log in shared/realruns (other people's Trainer states, Lightning CSVs and
TensorBoard event files) opens through ``dltop check --json`` with exit 0, 1 or 2: never
3 (unreadable) and never a traceback. Run in this process (271 files; a subprocess each
would take minutes on two cores); one per kind also through a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from foreignkit import REALRUNS, check_json, dltop

pytest.importorskip("tensorboard")
KINDS = ("hf", "lightning", "tensorboard")


def _files(kind: str) -> list[Path]:
    if not (REALRUNS / kind).is_dir():
        pytest.skip(f"no {REALRUNS / kind} (the shared real-runs folder is not checked out)")
    return sorted((REALRUNS / kind).iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_every_real_log_opens(kind: str, capsys: Any) -> None:
    files = _files(kind)
    assert files
    bad = []
    for f in files:
        code, out = check_json(capsys, f)
        if code not in (0, 1, 2) or not out.get("steps"):
            bad.append((f.name, code, out.get("stderr")))
    assert not bad, bad


@pytest.mark.parametrize("kind", KINDS)
def test_one_real_log_per_kind_in_a_subprocess(kind: str) -> None:
    f = _files(kind)[0]
    done = dltop("check", str(f), "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["steps"] > 0


def test_every_real_run_has_a_label() -> None:
    """benchmarks/realruns_labels.tsv labels every run of the corpus (by eye, before dltop
    judged it) with one of the known labels."""
    import csv

    manifest = REALRUNS / "MANIFEST.tsv"
    if not manifest.is_file():
        pytest.skip(f"no {manifest} (the shared real-runs folder is not checked out)")
    with open(manifest, encoding="utf-8") as f:
        files = {r["file"] for r in csv.DictReader(f, delimiter="\t")}
    labels_file = Path(__file__).resolve().parents[2] / "benchmarks" / "realruns_labels.tsv"
    with open(labels_file, encoding="utf-8") as f:
        rows = [ln.rstrip("\n").split("\t") for ln in f if not ln.startswith("#")]
    known = {"healthy", "overfitting", "diverged", "nan", "collapsed", "plateau", "unclear"}
    assert all(len(r) == 3 and r[1] in known and r[2] for r in rows)
    assert {r[0] for r in rows} == files
