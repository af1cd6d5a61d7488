"""Helpers for the tests of other tools' logs (tests/test_foreign_*.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dltop.tui import cli

# CI checks out the project beside shared/ (../shared relative to the checkout)
REALRUNS = Path(__file__).resolve().parents[2] / "shared" / "realruns"


def check_json(capsys: Any, source: str | os.PathLike[str]) -> tuple[int, dict[str, Any]]:
    """``dltop check SOURCE --json`` in this process: exit code and the parsed object."""
    capsys.readouterr()
    code = cli.main(["check", os.fspath(source), "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, (json.loads(out) if out.strip() else {"stderr": err})


def check_text(capsys: Any, source: str | os.PathLike[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["check", os.fspath(source)])
    out, err = capsys.readouterr()
    return code, out, err


def dltop(*args: str, pre: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -c`` running dltop's CLI, with ``pre`` code run first (to hide a module)."""
    code = f"import sys\n{pre}\nfrom dltop.tui.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL, cwd=cwd,
    )  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]
