"""dltop's import graph, read from the files alone: no install, no import, stdlib only.

    python3 scripts/importgraph.py            # every import placed? (exit 1 if not)
    python3 scripts/importgraph.py --cycles   # ... and the import cycles (exit 1 if any)
    python3 scripts/importgraph.py --dot      # the package-level graph, for graphviz
    python3 scripts/importgraph.py --wings    # the wings' layers, and any import against them

Why: inside ``probe/`` and ``tui/`` every import of our own code is relative, so it
resolves by file location, the way editors, mypy and structure-drawing tools read a
fresh clone (``dltop.*`` resolves only through an install or the ``dltop/`` symlinks).
This walks every import statement of every module under those folders and places it:
one of our files, the standard library, or a dependency declared in pyproject.toml.
An import it cannot place is an error, and so is an absolute ``dltop.`` import there.
``tests/project/test_static_imports.py`` runs the same walk in ``make test``.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("probe", "tui")  # the product's code; demos/, tests/ and benchmarks/ use dltop.*
# the wings of tui/core, lowest first: a wing imports only from the wings before it (and
# from probe/); every record's path reads left to right: bytes (files) become records in a
# source, which feeds the store and the rules (store.pipeline); the diagnosis reads the
# rules; a job of ranks is several runs; present shapes it all for a screen or a report
WINGS = ("text", "files", "rules", "diagnosis", "store", "ranks", "sources", "present")

# import names of the declared distributions whose import name is not their own
IMPORT_NAMES = {
    "nvidia-ml-py": ("pynvml",),
    "textual-serve": ("textual_serve",),
    "prometheus-client": ("prometheus_client",),
    "pytest-timeout": ("pytest_timeout",),
    "pytest-xdist": ("xdist",),
    "pytest-textual-snapshot": ("pytest_textual_snapshot",),
}


@dataclass(frozen=True)
class Import:
    """One import statement's target, as placed: ``module`` is ours (``tui.core.store``),
    else ``external`` names the stdlib or third-party top-level name."""

    source: str  # the importing module, e.g. "tui.core.rules.engine"
    line: int
    module: str | None  # our module imported, dotted from the repository root
    external: str | None
    at_import: bool  # runs when the module is imported (not in a function, not TYPE_CHECKING)
    error: str | None = None


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, root: Path) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def declared_imports(root: Path = ROOT) -> set[str]:
    """Top-level import names of every distribution pyproject.toml declares (any extra)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    names: set[str] = set()
    for req in reqs:
        dist = req.split(";")[0]
        for stop in "<>=!~[ ":
            dist = dist.split(stop)[0]
        dist = dist.strip().lower()
        names.update(IMPORT_NAMES.get(dist, (dist.replace("-", "_"),)))
    return names


def _walk(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it runs at import time."""
    work: list[tuple[ast.AST, bool]] = [(n, True) for n in tree.body]
    while work:
        node, top = work.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, top
            continue
        if isinstance(node, ast.If) and top:
            t = node.test
            checking = (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
            )
            work += [(n, not checking) for n in node.body] + [(n, top) for n in node.orelse]
            continue
        inner = top and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        work += [(n, inner) for n in ast.iter_child_nodes(node)]


def imports_of(path: Path, root: Path = ROOT, allowed: set[str] | None = None) -> list[Import]:
    """Every import of one file, each placed (or with ``error`` saying why not)."""
    allowed = declared_imports(root) if allowed is None else allowed
    external_ok = set(sys.stdlib_module_names) | {"__future__"} | allowed
    src = module_name(path, root)
    package = src.split(".") if path.name == "__init__.py" else src.split(".")[:-1]
    out: list[Import] = []
    for node, top in _walk(ast.parse(path.read_text(), filename=str(path))):
        line = node.lineno
        if isinstance(node, ast.ImportFrom) and node.level:
            up = node.level - 1
            if up > len(package):
                out.append(Import(src, line, None, None, top, "relative import above the root"))
                continue
            base = package[: len(package) - up]
            target = ".".join(base + (node.module.split(".") if node.module else []))
            if not _is_module(target, root):
                out.append(Import(src, line, None, None, top, f"no module file for {target}"))
                continue
            for alias in node.names:  # `from . import store`: a submodule, or a name in it
                sub = f"{target}.{alias.name}"
                place = sub if _is_module(sub, root) else target
                out.append(Import(src, line, place, None, top))
            continue
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            top_name = name.split(".")[0]
            if top_name == "dltop":
                error = (
                    f"absolute import of {name}: inside {'/, '.join(PACKAGES)}/ use a relative one"
                )
                out.append(Import(src, line, None, None, top, error))
            elif top_name in external_ok:
                out.append(Import(src, line, None, top_name, top))
            else:
                error = f"cannot place {name}: not ours, not stdlib, not declared in pyproject.toml"
                out.append(Import(src, line, None, None, top, error))
    return out


def python_files(root: Path = ROOT) -> list[Path]:
    return sorted(
        p for pkg in PACKAGES for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts
    )


def all_imports(root: Path = ROOT) -> list[Import]:
    allowed = declared_imports(root)
    return [i for p in python_files(root) for i in imports_of(p, root, allowed)]


def cycles(imports: list[Import], at_import_only: bool = False) -> list[list[str]]:
    """Strongly connected groups of our modules (each a cycle, or several tangled), sorted.

    A package's ``__init__`` importing its own submodules is not counted as a cycle with
    them (Python runs the package first by definition)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.module and i.module != i.source and (i.at_import or not at_import_only):
            if i.source.startswith(i.module + "."):
                continue  # a module naming its own package (`from . import x`)
            graph.setdefault(i.source, set()).add(i.module)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan, iterative enough for our depth
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def package_of(module: str) -> str:
    """The folder a module lives in (``tui.core.rules``), the unit of the drawing."""
    parts = module.split(".")
    return ".".join(parts[:-1]) if _is_module(module, ROOT) and len(parts) > 1 else module


def dot(imports: list[Import]) -> str:
    edges = sorted(
        {
            (package_of(i.source), package_of(i.module))
            for i in imports
            if i.module and package_of(i.source) != package_of(i.module)
        }
    )
    lines = ["digraph dltop {", "  rankdir=LR;"]
    lines += [f'  "{a}" -> "{b}";' for a, b in edges]
    return "\n".join(lines + ["}"])


def wing_tangles(imports: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """Pairs of folders that import each other (``a -> b`` and ``b -> a``), with the
    imports behind each arrow: what still keeps the wings from reading as layers (the
    modules themselves have no cycle; issue 32 wants none between the wings either)."""
    arrows: dict[tuple[str, str], list[Import]] = {}
    for i in imports:
        if i.module is None:
            continue
        a, b = package_of(i.source), package_of(i.module)
        if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
            arrows.setdefault((a, b), []).append(i)
    return {k: v for k, v in sorted(arrows.items()) if (k[1], k[0]) in arrows}


def wing_of(module: str) -> str | None:
    """The wing of ``tui.core.<wing>...`` (sub-folders belong to their wing), else None."""
    parts = module.split(".")
    if parts[:2] != ["tui", "core"] or len(parts) < 3 or parts[2] not in WINGS:
        return None
    return parts[2]


def against_layers(imports: list[Import]) -> list[Import]:
    """Imports from a wing to one after it in ``WINGS`` (at import time or not: a late
    import is still a dependency a reader has to know about)."""
    out = []
    for i in imports:
        a, b = wing_of(i.source), wing_of(i.module or "")
        if a is not None and b is not None and WINGS.index(b) > WINGS.index(a):
            out.append(i)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", action="store_true", help="list import cycles among our modules")
    ap.add_argument("--dot", action="store_true", help="print the package graph as graphviz dot")
    ap.add_argument(
        "--wings", action="store_true", help="the wings' layers and imports against them"
    )
    args = ap.parse_args()
    imports = all_imports()
    errors = [i for i in imports if i.error]
    for i in errors:
        print(f"{i.source}:{i.line}: {i.error}")
    if args.dot:
        print(dot(imports))
    tangled = 0
    if args.wings:
        print("wings, lowest first: " + " < ".join(WINGS))
        up = against_layers(imports)
        print(f"{len(up)} imports against the layers")
        for i in up:
            print(f"  {i.source}:{i.line} -> {i.module}")
        tangled = len(up)
        tangles = wing_tangles(imports)
        print(f"{len(tangles) // 2} pairs of folders import each other")
        for (a, b), found in tangles.items():
            late = sum(1 for i in found if not i.at_import)
            print(f"  {a} -> {b}: {len(found)} imports ({late} inside functions or for types)")
            for i in found:
                print(f"    {i.source}:{i.line} -> {i.module}")
    if args.cycles:
        for kind, only in (("at import time", True), ("any import", False)):
            found = cycles(imports, at_import_only=only)
            print(f"{len(found)} cycles ({kind})")
            for group in found:
                print("  " + " <-> ".join(group))
            tangled += len(found)
    ours = sum(1 for i in imports if i.module)
    print(
        f"{len(python_files())} files, {len(imports)} imports, {ours} of our modules, "
        f"{len(errors)} not placed",
        file=sys.stderr,
    )
    return 1 if errors or tangled else 0


if __name__ == "__main__":
    sys.exit(main())
