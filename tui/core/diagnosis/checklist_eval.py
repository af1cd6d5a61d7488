"""A checklist marked from what the log shows: "yes"/"no" with the measured value.

A step whose question the log can answer carries a ``check`` (a fact or a key of the
alert's evidence, an operator, a threshold); :func:`evaluate` marks it "yes"/"no" with
the measured value as evidence, or leaves it unmarked (``None``) when the log cannot
tell, for the user to answer. Checks are plain comparisons, never evaluated strings.
Why apart from ``checklists.py``: that module reads and validates the files; this one
judges a loaded checklist against a run, and only the report and the viewer need it.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

from ..rules.alerts import Alert
from ..rules.facts import Fact
from ..text.fmt import is_number
from ..text.fmt import number as format_number
from ..text.fmt import styled as format_value
from .checklists import UNARY_OPS, Checklist, ChecklistStep

_ORDERING = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class CheckedStep:
    """A step with its automatic answer: mark "yes"/"no", or None when the log can't tell."""

    step: ChecklistStep
    mark: str | None
    evidence: str | None
    value: Any = None  # the number or flag the log answered with (the verdict's ``{value}``)

    def line(self) -> str:
        """One line for a report: "Was the learning rate high? lr = 3.0 at step 120 — yes"."""
        said = f" {self.evidence}" if self.evidence else ""
        return f"{self.step.text}{said} — {self.mark}" if self.mark else f"{self.step.text}{said}"


def evaluate(checklist: Checklist, facts: dict[str, Fact], alert: Alert) -> list[CheckedStep]:
    """Mark every step the log can answer; leave the rest (mark None) for the user."""
    return [_evaluate_step(step, facts, alert) for step in checklist.steps]


def _evaluate_step(step: ChecklistStep, facts: dict[str, Fact], alert: Alert) -> CheckedStep:
    check = step.check
    if check is None:
        return CheckedStep(step, None, None)
    fmt = check.get("format", "number")
    if "fact" in check:
        fact = facts.get(check["fact"])
        if fact is None or fact.value is None:
            return CheckedStep(step, None, None)
        value: Any = fact.value
        said = (
            fact.describe()
            if fmt == "number"
            else _with_step(f"{fact.name} = {format_value(value, fmt)}", fact.step)
        )
    else:
        key = check["evidence"]
        value = (alert.evidence or {}).get(key)
        if value is None:
            return CheckedStep(step, None, None)
        said = _with_step(f"{key} = {format_value(value, fmt)}", alert.step)
    op = check["op"]
    if op in UNARY_OPS:
        truthy = bool(value) and not (isinstance(value, float) and math.isnan(value))
        return CheckedStep(step, _yes_no(truthy == (op == "is_true")), said, value)
    if "ref" in check or "ref_evidence" in check:
        if "ref" in check:
            fact_ref = facts.get(check["ref"])
            ref_name, ref_value = check["ref"], None if fact_ref is None else fact_ref.value
        else:  # a threshold the rule itself reported, e.g. the stall's warn_s
            ref_name = check["ref_evidence"]
            ref_value = (alert.evidence or {}).get(ref_name)
        if ref_value is None or not is_number(ref_value):
            return CheckedStep(step, None, None)
        scale = check.get("scale", 1)
        threshold: Any = ref_value * scale
        prefix = f"{format_number(scale)} × " if scale != 1 else ""
        said = f"{said}; {prefix}{ref_name} = {format_value(threshold, fmt)}"
    else:
        threshold = check["value"]
    result = _compare(value, op, threshold)
    return CheckedStep(step, None if result is None else _yes_no(result), said, value)


def _with_step(text: str, step: int | None) -> str:
    return text if step is None else f"{text} at step {step}"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _compare(value: Any, op: str, threshold: Any) -> bool | None:
    """A comparison of like with like; None when they cannot be compared (or NaN)."""
    if is_number(value) and is_number(threshold):
        if any(isinstance(x, float) and math.isnan(x) for x in (value, threshold)):
            return None
    elif type(value) is not type(threshold):
        return None
    if op in ("==", "!="):
        return (value == threshold) == (op == "==")
    if isinstance(value, bool) or not is_number(value):
        return None  # ordering is for numbers only
    return bool(_ORDERING[op](value, threshold))
