"""The rules engine's shape, enforced: rules read the engine, report through its sink, and
never write its state (the figures have one writer, the engine; see docs/dev/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "tui" / "core" / "rules"
# steploop.py is the engine's own per-step path for feed_many, split out of engine.py
ENGINE_SIDE = {"engine.py", "steploop.py", "figures.py", "config.py", "window.py", "__init__.py"}
MUTATORS = {"append", "extend", "clear", "pop", "popleft", "insert", "remove", "update", "add"}


def _rooted_at_engine(node: ast.expr) -> bool:
    """`e.x...`, `engine.x...` or `self.e.x...`: an attribute chain on the engine."""
    chain = node
    while isinstance(chain, (ast.Attribute, ast.Subscript)):
        inner = chain.value
        if isinstance(inner, ast.Name) and inner.id in ("e", "engine"):
            return True
        if (
            isinstance(inner, ast.Attribute)
            and inner.attr == "e"
            and isinstance(inner.value, ast.Name)
            and inner.value.id == "self"
        ):
            return isinstance(chain, (ast.Attribute, ast.Subscript))
        chain = inner
    return False


def _writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, (ast.Attribute, ast.Subscript)) and _rooted_at_engine(el):
                    found.append(f"{path.name}:{node.lineno} assigns {ast.unparse(el)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and _rooted_at_engine(node.func.value)
            and ast.unparse(node.func.value) not in ("e.sink", "self.e.sink")
        ):
            found.append(f"{path.name}:{node.lineno} mutates {ast.unparse(node.func)}")
    return found


RULE_FILES = sorted(p for p in RULES.glob("*.py") if p.name not in ENGINE_SIDE)


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rules_never_write_the_engine(path: Path) -> None:
    assert _writes(path) == []


def test_the_check_sees_a_write() -> None:
    """The checker itself: a rule that writes the engine's threshold is caught."""
    bad = RULES.parent / "_probe_shape_example.py"
    try:
        bad.write_text("def thresholds(e):\n    e.loss_hi = 1.0\n    e.fig.loss_win.append(2)\n")
        assert len(_writes(bad)) == 2
    finally:
        bad.unlink()


def _trackers_held(rule: object) -> set[int]:
    """Every Tracker among a rule's attributes (one level into dicts and lists): what the
    engine used to find by scanning ``vars(rule)``, which compiled instances do not have."""
    from dltop.tui.core.rules.base import Tracker

    found: set[int] = set()
    for value in vars(rule).values():
        items = (
            value.values()
            if isinstance(value, dict)
            else value
            if isinstance(value, list)
            else [value]
        )
        found |= {id(v) for v in items if isinstance(v, Tracker)}
    return found


def test_every_rule_lists_every_tracker_it_holds() -> None:
    """``Rule.alert_trackers`` is how a new segment clears the episodes still up: a tracker
    a rule forgets to list would stay up across a rewind. Checked after a run that creates
    the trackers made on the way (one per eval set)."""
    from dltop.tui.core.rules import RuleEngine

    engine = RuleEngine()
    for i in range(200):
        engine.feed({"kind": "step", "step": i, "t": float(i), "loss": 2.0, "grad_norm": 1.0})
        if i % 50 == 49:
            engine.feed({"kind": "eval", "step": i, "t": float(i), "loss": 2.0, "val_loss": 2.1})
    for rule in engine.rules:
        listed = [id(t) for t in rule.alert_trackers()]
        assert len(listed) == len(set(listed)), type(rule).__name__
        assert set(listed) == _trackers_held(rule), type(rule).__name__
    assert len(engine.overfitting_rule.alert_trackers()) >= 1
