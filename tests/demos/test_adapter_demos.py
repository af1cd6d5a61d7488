"""The adapter demos' own rule: without their framework, one line naming the extra.

Their end-to-end runs (each ends with its catalogue alert within its step budget) are
in ``tests/demos/test_demos.py`` with every other demo (``make test-all``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# how a person starts a demo: through `dltop demo`, or the module the README names
ENTRY = {
    "dltop demo": "from dltop.tui.cli import main\n"
    "sys.exit(main(['demo', {demo!r}, '--no-ui', '--out', {out!r}]))",
    "python -m": "import runpy\nsys.argv = [{demo!r}, '--out', {out!r}]\n"
    "runpy.run_module('dltop.demos.' + {demo!r}, run_name='__main__')",
}


@pytest.mark.parametrize("entry", sorted(ENTRY))
@pytest.mark.parametrize(
    ("demo", "module", "extra"),
    [("lightning_overfit", "lightning", "lightning"), ("hf_lr_blowup", "transformers", "hf")],
)
def test_a_missing_framework_is_one_line_with_the_extra(
    entry: str, demo: str, module: str, extra: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "x.jsonl")
    code = f"import sys; sys.modules[{module!r}] = None\n" + ENTRY[entry].format(demo=demo, out=out)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and f"pip install 'dltop-monitor[{extra}]'" in err[0], proc.stderr
    assert not (tmp_path / "x.jsonl").exists()
