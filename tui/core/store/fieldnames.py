"""How a record's fields become series: which keys are not series, the names nested
values get, and when a step column is plain numbers (the store's fast path).

Why apart from the store: the naming is part of what a user sees (``sys.gpus.0.util``,
``lrs.1``, ``eval.loss``), the store's job is keeping the columns.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

from ....probe import schema
from ....probe.schema import Record

STEP_NOT_SERIES = frozenset(("kind", "step"))  # step-record keys that are not series
_NOT_SERIES = frozenset(("kind", "step", "t"))  # eval / sys keys that are not series

num = schema.as_float  # int/float -> float; None for bools, strings, containers


def dense(col: list[Any]) -> array | None:
    """``col`` as float64 when every entry is a plain int/float (no None, str, bool)."""
    try:
        arr = array("d", col)
    except (TypeError, OverflowError):
        return None
    # bools pass array('d') but are not numbers (schema.as_float); one C-level pass finds them
    if bool in set(map(type, col)):
        return None
    return arr


def flatten(kind: str, rec: Record) -> list[tuple[str, float]]:
    """Numeric fields of an eval/sys record as (series name, value), one nesting level deep
    (``{"gpus": [{"index": 0, "util": 97}]}`` -> ``sys.gpus.0.util``)."""
    out: list[tuple[str, float]] = []
    for k, val in rec.items():
        if k in _NOT_SERIES:
            continue
        f = num(val)
        if f is not None:
            out.append((f"{kind}.{k}", f))
        elif isinstance(val, dict):
            out.extend(
                (f"{kind}.{k}.{sk}", f2) for sk, sv in val.items() if (f2 := num(sv)) is not None
            )
        elif isinstance(val, list):
            for i, item in enumerate(val):
                if isinstance(item, dict):
                    idx = item.get("index", i)
                    out.extend(
                        (f"{kind}.{k}.{idx}.{sk}", f2)
                        for sk, sv in item.items()
                        if sk != "index" and (f2 := num(sv)) is not None
                    )
                elif (f2 := num(item)) is not None:
                    out.append((f"{kind}.{k}.{i}", f2))
    return out


def sub_columns(key: str, col: list[Any]) -> Iterator[tuple[str, int | str | None, bool]]:
    """A step column split by its first value's shape, as (series name, where in each
    value, from a list): a list field (``lrs``) into ``key.0``, ``key.1``... (``True``:
    the caller refuses the rest of a list with one index), a dict field into
    ``key.<subkey>``, any other column as itself (``None``). Names only: the caller
    builds a sub-column (``part_of``) for the series it admits, never for those it refuses."""
    first = next((x for x in col if x is not None), None)
    if isinstance(first, list):
        width = max(len(x) for x in col if isinstance(x, list))
        for i in range(width):
            yield f"{key}.{i}", i, True
    elif isinstance(first, dict):
        subkeys: dict[str, None] = {}
        for x in col:
            if isinstance(x, dict):
                subkeys.update(dict.fromkeys(x))
        for sk in subkeys:
            yield f"{key}.{sk}", sk, False
    else:
        yield key, None, False


def part_of(col: list[Any], at: int | str | None) -> list[Any]:
    """The values at ``at`` (a list index or a dict key, see ``sub_columns``) of a column."""
    if at is None:
        return col
    if isinstance(at, int):
        return [x[at] if isinstance(x, list) and len(x) > at else None for x in col]
    return [x.get(at) if isinstance(x, dict) else None for x in col]
