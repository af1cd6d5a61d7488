"""The rules give the same answers however the records are cut into batches.

A live viewer feeds the engine a few records at a time, ``dltop check`` 64 KiB chunks, a
report the whole file: one run must get one diagnosis. Each source here is fed in batches
of 1, 7, 4096 records and whole, and every alert (id, first and last step, severity,
whether active, evidence), the status and the verdict must be identical. Sources: public
logs of ``shared/realruns`` (every 6th here, all of them in the slow tier), synthetic
faults and healthy runs (tests/rulekit.py). The demo logs and the fault suite's logs are
compared by ``benchmarks/answers.py`` (``record`` before/after a change).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.decoding import read_records
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.sources import foreign
from rulekit import Run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from answers import engine_answer  # noqa: E402

REALRUNS = Path(__file__).resolve().parents[3] / "shared" / "realruns"
SIZES = (1, 7, 4096, 0)  # 0: the whole run at once


def _records(path: Path) -> list[dict[str, Any]]:
    fmt = foreign.detect(str(path))
    if fmt is not None:
        return foreign.load(str(path), fmt).records
    return read_records(str(path))[0]


def _answer(records: list[dict[str, Any]], size: int) -> dict[str, Any]:
    engine = RuleEngine(Config.load())
    if size == 0:
        engine.feed_many(records)
    else:
        for i in range(0, len(records), size):
            engine.feed_many(records[i : i + size])
    engine.finish()
    return engine_answer(engine)


def _same_everywhere(name: str, records: list[dict[str, Any]]) -> None:
    whole = _answer(records, 0)
    for size in SIZES[:-1]:
        got = _answer(records, size)
        assert got == whole, f"{name}: batches of {size} answer differently"


def _public(every: int) -> list[Path]:
    files: list[Path] = []
    for manifest in sorted(REALRUNS.glob("MANIFEST*.tsv")):
        for line in manifest.read_text().splitlines()[1:]:
            rel = line.split("\t")[1].strip() if "\t" in line else ""
            if rel and (REALRUNS / rel).is_file():
                files.append(REALRUNS / rel)
    return sorted(set(files))[::every]


SYNTHETIC: dict[str, Callable[[], Run]] = {
    "healthy": lambda: Run(),
    "diverged": lambda: Run(loss_at=lambda i, x: x * (5 if i >= 400 else 1)),
    "never_learned": lambda: Run(tau=1e9, noise=0.05),
    "nan_eval": lambda: Run(eval_every=100, eval_at=lambda i, x: math.nan),
    "nan_loss": lambda: Run(loss_at=lambda i, x: math.nan if i >= 500 else x),
    "grad_explosion": lambda: Run(gn_at=lambda i, g: g * (1e4 if 300 <= i < 310 else 1)),
    "zero_loss": lambda: Run(loss_at=lambda i, x: 0.0 if i >= 20 else x),
    "spike": lambda: Run(loss_at=lambda i, x: x * (40 if i == 450 else 1)),
}


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_runs_answer_the_same_in_any_batches(name: str) -> None:
    _same_everywhere(name, list(SYNTHETIC[name]().records()))


@pytest.mark.slow
def test_public_logs_answer_the_same_in_any_batches() -> None:
    files = _public(every=6)
    if not files:
        pytest.skip(f"no public logs in {REALRUNS}")
    for path in files:
        _same_everywhere(str(path.relative_to(REALRUNS)), _records(path))


@pytest.mark.slow
def test_every_public_log_answers_the_same_in_any_batches() -> None:
    files = _public(every=1)
    if not files:
        pytest.skip(f"no public logs in {REALRUNS}")
    for path in files:
        _same_everywhere(str(path.relative_to(REALRUNS)), _records(path))
