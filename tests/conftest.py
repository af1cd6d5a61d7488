"""Fixtures shared by the tests that open Unix sockets."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private dir with a short path (AF_UNIX paths are limited to ~107 bytes, and
    pytest's tmp_path is longer than that on some machines)."""
    d = Path("/tmp") / f"dltop-t-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(mode=0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)
