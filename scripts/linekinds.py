"""Product code lines by kind: code, comment, docstring, blank (``probe/``, ``tui/``, ``demos/``).

    python3 scripts/linekinds.py [ROOT]

Why: "product code lines down, not up" (issue 32) was counted with ``wc -l``, which
counts a module's reasons (docstrings) and blank lines with its code; this says which
kind grew. A docstring is the first string statement of a module, class or function
(found with ``ast``); a comment line starts with ``#``; a line of code with a trailing
comment is code. Stdlib only: runs from a fresh clone, or on ``git archive REV`` output.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

KINDS = ("code", "comment", "doc", "blank")
DOC_OWNERS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def kinds_of(source: str) -> list[str]:
    lines = source.splitlines()
    kind = [
        "blank" if not s.strip() else "comment" if s.strip().startswith("#") else "code"
        for s in lines
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, DOC_OWNERS) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
                and first.end_lineno is not None
            ):
                for i in range(first.lineno - 1, first.end_lineno):
                    kind[i] = "doc"
    return kind


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    total = dict.fromkeys(KINDS, 0)
    for folder in ("probe", "tui", "demos"):
        for path in sorted((root / folder).rglob("*.py")):
            for k in kinds_of(path.read_text(encoding="utf-8")):
                total[k] += 1
    print(" ".join(f"{k} {n}" for k, n in total.items()), f"all {sum(total.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
