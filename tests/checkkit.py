"""``dltop check SOURCE --json`` in a real subprocess, as a script or CI would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def check_run(source: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed report; the exit code must be a verdict (0/1/2), never "unreadable"."""
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", os.fspath(source), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 1, 2), done.stderr
    return json.loads(done.stdout)
