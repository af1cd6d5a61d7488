"""Fixtures shared across test files: short socket dirs, the fault suite's quick runs."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from threadkit import threads_left


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every quick fault-suite scenario trained and diagnosed once, two at a time (real
    trainings: shared by the suite's scoring and the same-answers test)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.faults.harness import plan, run_suite

    logs = tmp_path_factory.mktemp("fault-logs")
    results = run_suite(plan(quick=True), jobs=2, log_dir=str(logs))
    return {r.scenario: r for r in results}


@pytest.fixture(scope="session")
def quick_fault_logs(quick_results: dict[str, Any]) -> list[Path]:
    """The logs of the quick fault-suite runs that produced one."""
    return [Path(r.log) for r in quick_results.values() if r.log and Path(r.log).is_file()]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private dir with a short path (AF_UNIX paths are limited to ~107 bytes, and
    pytest's tmp_path is longer than that on some machines)."""
    d = Path("/tmp") / f"dltop-t-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(mode=0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_thread_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test ends the threads it starts (``tests/threadkit.py`` says why): after its own
    fixtures are torn down, each new thread gets up to 10 s to end; one still running
    fails the test that left it, by name. Not for the slow tier's trainings and jobs,
    which run one test after the other in one process and fork nothing there."""
    before = set(threading.enumerate())
    yield
    if request.node.get_closest_marker("slow") is None:
        left = threads_left(before, within=10.0)
        if left:
            pytest.fail(f"the test left threads running: {', '.join(left)}", pytrace=False)
