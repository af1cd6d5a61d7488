"""Imports a tool can follow from the files alone (``scripts/importgraph.py``).

Inside ``probe/`` and ``tui/`` our own modules are imported relatively, so editors, mypy
and graph-drawing tools resolve them by file location in a fresh clone, without the
install or the ``dltop/`` symlinks. Every import must be placed: one of our files, the
standard library, or a dependency pyproject.toml declares. No import cycles.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from graphload import importgraph

ROOT = Path(__file__).resolve().parents[2]
ig = importgraph()

# the engine's own modules: the layers that build the rules and route records to them,
# the per-step path and the facts; every other module of rules/ is a rule or a helper
ENGINE_SIDE = {"engine", "ruleset", "steploop", "run_facts", "__init__"}


def test_every_import_is_placed() -> None:
    imports = ig.all_imports()
    errors = [f"{i.source}:{i.line}: {i.error}" for i in imports if i.error]
    assert not errors, "\n".join(errors)
    # the graph is really there: our modules import each other by file location
    assert sum(1 for i in imports if i.module) > 500


def test_no_import_cycles() -> None:
    groups = ig.cycles(ig.all_imports())
    assert not groups, "import cycles: " + "; ".join(" <-> ".join(g) for g in groups)


def test_no_rule_imports_the_engine() -> None:
    """Rules are typed against ``rules.state.EngineState``: what the engine knows of the
    run. A rule that imported the engine (or its list of rules) could read any other
    rule's state; one that needs another's finding is handed it by ``ruleset``."""
    rules = ROOT / "tui" / "core" / "rules"
    checked = 0
    for path in sorted(rules.glob("*.py")):
        if path.stem in ENGINE_SIDE:
            continue
        checked += 1
        for i in ig.imports_of(path):
            assert i.module not in ("tui.core.rules.engine", "tui.core.rules.ruleset"), (
                f"{path.name}:{i.line} imports {i.module}"
            )
    assert checked >= 15  # every rule module was looked at


def test_the_check_runs_with_nothing_installed() -> None:
    """-S: no site-packages (a fresh clone's python); -I: nothing from the environment."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(ROOT / "scripts" / "importgraph.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 not placed" in out.stderr


def test_the_check_finds_what_it_cannot_place(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["nvidia-ml-py>=12", "rich"]\n'
    )
    pkg = tmp_path / "tui" / "core"
    pkg.mkdir(parents=True)
    (tmp_path / "tui" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "store.py").write_text("X = 1\n")
    (pkg / "bad.py").write_text(
        "import os\nimport pynvml\nimport rich.text\n"
        "from .store import X\n"  # ours: placed
        "from .nowhere import Y\n"  # no such file
        "from dltop.tui.core.store.runstore import X\n"  # absolute: not by file location
        "def f():\n    import requests\n"  # undeclared, even inside a function
        "from ....too_far import Z\n"
    )
    found = {(i.line, i.error is None) for i in ig.imports_of(pkg / "bad.py", tmp_path)}
    assert found == {
        (1, True),
        (2, True),
        (3, True),
        (4, True),
        (5, False),
        (6, False),
        (8, False),
        (9, False),
    }


def test_cycles_are_found(tmp_path: Path) -> None:
    a = ig.Import("p.a", 1, "p.b", None, at_import=False)
    b = ig.Import("p.b", 1, "p.a", None, at_import=True)
    c = ig.Import("p.c", 1, "p.a", None, at_import=True)
    assert ig.cycles([a, b, c]) == [["p.a", "p.b"]]
    assert ig.cycles([a, b, c], at_import_only=True) == []


def test_the_cli_commands_name_modules_that_exist() -> None:
    """``cli.py`` imports its sub-commands by name (a lazy root): each name is a file."""
    from dltop.tui import cli

    for name in [*cli.COMMANDS.values(), cli.VIEW_MODULE]:
        dotted = name.removeprefix("dltop.")
        assert ig._is_module(dotted, ROOT), name


def test_the_wings_are_layers() -> None:
    """Each wing of tui/core imports only from the wings before it in ``WINGS`` (text <
    files < rules < diagnosis < store < ranks < sources < present), so the import graph
    reads as layers; every module of tui/core lives in one of them."""
    up = ig.against_layers(ig.all_imports())
    assert not up, "imports against the wings' layers: " + "; ".join(
        f"{i.source}:{i.line} -> {i.module}" for i in up
    )
    core = ROOT / "tui" / "core"
    folders = sorted(p.name for p in core.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(ig.WINGS)
    assert [p.name for p in core.glob("*.py")] == ["__init__.py"]


def test_the_layer_check_finds_an_import_going_up() -> None:
    """The check is not empty by construction: a rule importing the store is caught, the
    store importing a rule is not."""
    up = ig.Import("tui.core.rules.plateau", 3, "tui.core.store.runstore", None, True)
    down = ig.Import("tui.core.store.run", 3, "tui.core.rules.engine", None, True)
    sub = ig.Import("tui.core.present.panels", 3, "tui.core.sources.foreign.common", None, False)
    assert ig.against_layers([up, down, sub]) == [up]
    assert ig.wing_of("tui.core.sources.foreign.tboard") == "sources"
