"""``scripts/importgraph.py`` loaded as a module for the tests (``scripts/`` is no package):
the static import walk that ``test_static_imports`` and ``test_boundaries`` both read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def importgraph() -> ModuleType:
    if "importgraph" in sys.modules:
        return sys.modules["importgraph"]
    spec = importlib.util.spec_from_file_location("importgraph", ROOT / "scripts/importgraph.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["importgraph"] = mod  # dataclasses look their module up while a class is made
    spec.loader.exec_module(mod)
    return mod
