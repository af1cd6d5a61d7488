"""The architecture's import rules, enforced.

- ``dltop.probe`` runs inside the user's training process: at import time it may load
  only the standard library (torch, psutil, pynvml, msgspec lazily, inside functions),
  and never textual or rich.
- The viewer's core (``dltop.tui.core``) has no Textual import, so the diagnosis is
  testable and usable (``dltop check``) without a UI.
- No part of the viewer imports torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "probe"
TUI = ROOT / "tui"
CORE = TUI / "core"
UI_LIBS = {"textual", "rich"}


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Top-level module names a file imports (module-level statements only, or all)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if top_level_only and isinstance(node, ast.If):
            # `if TYPE_CHECKING:` blocks never run
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                continue
            nodes.extend(node.body + node.orelse)  # noqa: B909 - walking a work list
            continue
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _py_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _py_files(PROBE), ids=lambda p: p.name)
def test_probe_imports_only_stdlib_at_module_level(path: Path) -> None:
    allowed = set(sys.stdlib_module_names) | {"dltop", "__future__"}
    bad = _imports(path, top_level_only=True) - allowed
    assert not bad, f"{path.name} imports {sorted(bad)} at import time; import lazily"


@pytest.mark.parametrize("path", _py_files(PROBE), ids=lambda p: p.name)
def test_probe_never_imports_ui(path: Path) -> None:
    bad = _imports(path, top_level_only=False) & (UI_LIBS | {"tui"})
    assert not bad, f"{path.name} imports {sorted(bad)}"
    assert "dltop.tui" not in path.read_text(), f"{path.name} reaches into the viewer"


@pytest.mark.parametrize("path", _py_files(CORE), ids=lambda p: p.name)
def test_core_has_no_textual(path: Path) -> None:
    bad = _imports(path, top_level_only=False) & UI_LIBS
    assert not bad, f"core module {path.name} imports {sorted(bad)}"
    assert "dltop.tui.app" not in path.read_text(), f"core module {path.name} imports the app"


def _placed() -> list:
    """Every import under probe/ and tui/, resolved by file location (our modules are
    imported relatively there, so a text search for ``dltop.tui`` would miss them)."""
    from graphload import importgraph

    return importgraph().all_imports()


def test_probe_and_core_reach_only_downwards() -> None:
    """The probe never imports the viewer; the viewer's core never imports the app."""
    bad = [
        f"{i.source}:{i.line} imports {i.module}"
        for i in _placed()
        if i.module
        and (
            (i.source.startswith("probe") and i.module.startswith("tui"))
            or (i.source.startswith("tui.core") and i.module.startswith("tui.app"))
        )
    ]
    assert not bad, bad


@pytest.mark.parametrize("path", _py_files(TUI), ids=lambda p: str(p.relative_to(TUI)))
def test_viewer_never_imports_torch(path: Path) -> None:
    assert "torch" not in _imports(path, top_level_only=False), f"{path} imports torch"


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT / "tests",
    ).stdout.split()
    return {m.split(".")[0] for m in out}


def test_fresh_import_of_probe_loads_nothing_heavy() -> None:
    loaded = _loaded_after("import dltop.probe\nfrom dltop.probe import Probe")
    heavy = {"torch", "textual", "rich", "psutil", "pynvml", "numpy", "msgspec", "orjson"}
    heavy |= {"lightning", "transformers", "accelerate"}  # the adapters' frameworks
    assert not loaded & heavy, f"importing the probe loaded {sorted(loaded & heavy)}"


def test_fresh_import_of_core_loads_no_ui_and_no_torch() -> None:
    mods = [
        "dltop.tui.core." + ".".join(p.relative_to(CORE).with_suffix("").parts)
        for p in _py_files(CORE)
        if p.stem != "__init__"
    ]
    code = "\n".join(f"import {m}" for m in mods) or "import dltop.tui.core"
    loaded = _loaded_after(code + "\nimport dltop.tui.cli")
    assert not loaded & (UI_LIBS | {"torch"}), sorted(loaded & (UI_LIBS | {"torch"}))


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for base, name in ((PROBE, "dltop.probe"), (TUI, "dltop.tui"), (ROOT / "demos", "dltop.demos")):
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    # folders of data (checklists, translations): listed too, or setuptools prints
    # "Package would be ignored" for each of them on every install
    for folder in [TUI / "data", *(TUI / "data").rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__":
            found.add(".".join(("dltop.tui", *folder.relative_to(TUI).parts)))
    assert found == listed, (
        f"pyproject packages differ: missing {found - listed}, stale {listed - found}"
    )


def test_ruff_is_pinned_to_the_installed_version() -> None:
    """`make test` checks formatting, which changes between ruff releases: one exact version."""
    from importlib.metadata import PackageNotFoundError, version

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [d.split("#")[0].strip() for d in dev["dev"] if d.startswith("ruff")]
    assert len(pins) == 1 and pins[0].startswith("ruff=="), pins
    try:
        installed = version("ruff")
    except PackageNotFoundError:
        return  # not installed with the dev extra: nothing to compare
    assert pins[0] == f"ruff=={installed}"
