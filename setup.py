"""Optional compiled build: ``DLTOP_COMPILE=1 pip install --no-build-isolation .``

Everything else about the package is in ``pyproject.toml``. Without ``DLTOP_COMPILE=1``
this adds nothing and the install is pure Python. With it, the modules listed under
``[tool.dltop] compiled`` are compiled with mypyc (a C compiler, the Python headers and
the pinned mypy of the ``dev`` extra are needed; ``--no-build-isolation`` lets the build
use that mypy): the same typed source, faster, with the same answers
(``benchmarks/compiled.py``). Never compiled in place: the extensions go into the wheel,
so an edited ``.py`` in the checkout is never shadowed by a stale ``.so``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def compiled_sources() -> list[str]:
    """The .py files under each ``[tool.dltop] compiled`` path (relative, through dltop/)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    out: list[str] = []
    for entry in config["tool"]["dltop"]["compiled"]:
        path = ROOT / entry
        if path.is_dir():
            out += [f"{entry}/{f.name}" for f in sorted(path.glob("*.py"))]
        else:
            out.append(entry)
    return out


def ext_modules() -> list[object]:
    if os.environ.get("DLTOP_COMPILE") != "1":
        return []
    try:
        from mypyc.build import mypycify  # only here: a plain build needs no mypy
    except ImportError:
        raise SystemExit(
            "DLTOP_COMPILE=1 needs mypy (its mypyc) where the build runs: install the dev "
            "extra (pip install -e '.[dev]') and build with --no-build-isolation"
        ) from None
    return list(mypycify(compiled_sources(), opt_level="3"))


if __name__ == "__main__":
    os.chdir(ROOT)  # mypyc names modules from paths relative to the root
    setup(ext_modules=ext_modules())
