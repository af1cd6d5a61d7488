"""A quiet install: building dltop prints no setuptools warning of ours.

``make demo`` is a newcomer's first command; 40 lines of "Package would be ignored
(dltop.tui.data.checklists.zh)" before the viewer opened were the first thing they read.
The wheel is built here without build isolation (no download), with the installed
setuptools, and every line of its output that says "warning" is one too many, except the
editable-install notice ``make`` silences (see the Makefile) and pip's own notes about
this machine's package index.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# pip's notes about an index location of the machine, and byte-compiling being off:
# neither is the project's
NOT_OURS = re.compile(r"WARNING: Location '|byte-compiling is disabled")


def test_building_the_wheel_prints_no_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), "-v"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (done.stdout + done.stderr).splitlines()
    warned = [
        line
        for line in lines
        if re.search(r"warn|would be ignored", line, re.I) and not NOT_OURS.search(line)
    ]
    assert warned == [], "\n".join(warned)
    wheel = next(tmp_path.glob("*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "dltop/tui/data/crash_patterns.toml" in names
    assert any(n.startswith("dltop/tui/data/checklists/zh/") for n in names)
