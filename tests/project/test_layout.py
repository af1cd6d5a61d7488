"""The tree is readable by tools without an install: `dltop/` holds relative symlinks.

The sources stay at the root (`probe/`, `tui/`, `demos/`) as the layout requires; the
import names are `dltop.probe`, `dltop.tui`, `dltop.demos`. An editable install maps
them, but a fresh clone, an editor's go-to-definition and the type checker read the
tree: `dltop/` (a namespace folder of relative symlinks) makes every `dltop.*` import
resolve from the checkout itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_dltop_folder_links_each_package_relatively() -> None:
    for name in ("probe", "tui", "demos"):
        link = ROOT / "dltop" / name
        assert link.is_symlink(), f"dltop/{name} must be a symlink"
        assert os.readlink(link) == f"../{name}", "relative, so a clone anywhere works"
    assert not (ROOT / "dltop" / "__init__.py").exists(), "dltop stays a namespace package"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make a fresh clone")
def test_a_fresh_clone_imports_without_an_install(tmp_path: Path) -> None:
    """`PYTHONPATH=. python -c "import dltop.tui.core.rules"` in a clone of this checkout
    loads the clone's files, through its dltop/ links (not an installed copy)."""
    clone = tmp_path / "clone"
    done = subprocess.run(
        ["git", "clone", "-q", str(ROOT), str(clone)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot clone this checkout: {done.stderr.strip()[:100]}")
    # the working tree, not only what is committed: the test must see these links
    for name in ("probe", "tui", "demos"):
        link = clone / "dltop" / name
        if not link.is_symlink():
            link.parent.mkdir(exist_ok=True)
            link.symlink_to(f"../{name}")
    code = (
        "import dltop.tui.core.rules, dltop.probe, dltop.demos, dltop.tui.check_cmd\n"
        "print(dltop.tui.core.rules.__file__)\nprint(dltop.probe.__file__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": "."}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=clone, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rules_file, probe_file = out.stdout.split()
    assert Path(rules_file).is_relative_to(clone / "dltop" / "tui"), rules_file
    assert Path(probe_file).is_relative_to(clone / "dltop" / "probe"), probe_file


def test_the_type_checker_reads_the_tree_through_dltop() -> None:
    """mypy checks probe/, tui/ and demos/ as `dltop.*` (configured in pyproject, run by
    `make test`), and the GPU check's parts beside them; no `dltop` import is exempt from
    resolution."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["dltop/probe", "dltop/tui", "dltop/demos", "scripts/gpu_check"]
    assert config.get("ignore_missing_imports") is not True
    for override in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"].get(
        "overrides", []
    ):
        assert not any(str(m).startswith("dltop") for m in override["module"])
    makefile = (ROOT / "Makefile").read_text()
    assert "-m mypy" in makefile.split("test:", 1)[1].split("\n\n", 1)[0], "make test runs it"


def test_the_compiled_build_names_modules_that_exist_and_are_type_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``DLTOP_COMPILE=1`` compiles the paths of ``[tool.dltop] compiled`` (setup.py): a
    renamed or moved module must fail here, not in the first compiled build, and mypyc
    compiles only what mypy checks (every compiled file is under a ``files`` root)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dltop_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # defines functions only: setup() runs under __main__
    sources = setup.compiled_sources()
    assert "dltop/tui/core/rules/engine.py" in sources
    assert "dltop/tui/core/rules/steploop.py" in sources
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    checked = config["tool"]["mypy"]["files"]
    for src in sources:
        assert (ROOT / src).is_file(), src
        assert any(src.startswith(root + "/") for root in checked), src
    monkeypatch.delenv("DLTOP_COMPILE", raising=False)
    assert setup.ext_modules() == []  # a plain build compiles nothing
    monkeypatch.setenv("DLTOP_COMPILE", "0")
    assert setup.ext_modules() == []
