"""The project's own files for people: a user changelog per version, short enough to
read, and a pre-commit configuration that checks what `make test` checks first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION_MAX = 5 * 1024  # bytes of one version's section (issue 32: what changed for users)


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.splitlines()[0]: "## " + p for p in parts}


def test_the_changelog_says_per_version_what_changed_for_users() -> None:
    sections = _sections((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert sections, "CHANGELOG.md has no '## <version>' section"
    assert next(iter(sections)).startswith("Unreleased"), "the newest version first"
    for name, body in sections.items():
        size = len(body.encode())
        assert size <= VERSION_MAX, (
            f"CHANGELOG section '{name}' is {size} bytes (at most {VERSION_MAX}): say what "
            "changed for users; measurements go to docs/dev/changelog-diary.md"
        )


def test_pre_commit_runs_the_checks_make_test_starts_with() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    for check in ("-m ruff check", "-m ruff format --check", "-m mypy"):
        assert check in make, f"make test no longer runs '{check}': update this test"
        assert check in config, f".pre-commit-config.yaml does not run '{check}'"


MODULE_MAX = 400  # lines: past this a module holds more than one job (issue 32)


def test_no_module_is_over_400_lines() -> None:
    """A module over ~400 lines is a smell: it does more than one job. Split it by job (a
    module docstring saying why it is apart), never by line count alone."""
    long = []
    for folder in ("probe", "tui", "demos"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > MODULE_MAX:
                long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, "over 400 lines: " + "; ".join(long)
