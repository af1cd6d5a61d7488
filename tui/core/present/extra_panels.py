"""Panels for every other scalar in the log: the picker's list and the panels it adds.

The built-in panels show what every run has (loss, grad norm, lr, timings, memory). What
people log beyond that (``probe.step(acc=...)`` extras, eval metrics other than the loss,
Hugging Face's ``rewards/*``, Lightning's extra columns) was only in the report's table;
here each becomes a panel on request (``m`` in the viewer, ``--panel NAME``), laid out and
drawn like the built-in ones: the raw line, its smoothed copy, and the eval series of the
same name as a line with markers (an eval point is an event, not a sample of a curve).

A panel's key is ``+<series>``: the person names a series, the panel draws it with its
eval twin. Nothing here imports Textual (``tests/project/test_boundaries.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..text.safetext import visible
from .chartdata import EMA, EVAL, RAW
from .panelspec import PanelSpec, Series

if TYPE_CHECKING:
    from ..store.runstore import Store

PREFIX = "+"
MAX_EXTRA = 12  # extra panels at once: past this a grid cell is a few characters wide
# series the built-in panels draw already, and the wall clock (not a metric)
_BUILT_IN = frozenset(
    (
        "t", "loss", "eval.loss", "grad_norm", "lr", "step_time", "compute_time", "data_time",
        "mem_allocated", "mem_reserved", "mem_limit", "samples_per_s", "sys.rss",
        "sys.gpus.0.util", "sys.gpus.0.mem_used",
    )
)  # fmt: skip
_EVAL = "eval."


@dataclass(frozen=True)
class Pickable:
    """One entry of the picker: the series a panel would be keyed by, what it draws."""

    name: str  # the series the panel is named after (a step series, else ``eval.<x>``)
    label: str  # what the picker shows: "acc (+ eval)", "eval.f1", "sys.gpus.1.util"
    points: int

    @property
    def key(self) -> str:
        return PREFIX + self.name


def is_extra(key: str) -> bool:
    return key.startswith(PREFIX)


def pickable(store: Store) -> list[Pickable]:
    """Every series no built-in panel draws: a training metric and its eval twin (``acc``
    and ``eval.acc``) are one entry, as they are one panel."""
    names = store.names()
    present = set(names)
    out: list[Pickable] = []
    for name in names:
        series = store.series(name)
        if name in _BUILT_IN or series is None or series.kind == "derived" or not len(series):
            continue
        if name.startswith(_EVAL) and name[len(_EVAL) :] in present:
            continue  # drawn on its training twin's panel
        twin = store.series(_EVAL + name)
        shown = visible(name, limit=60)
        label = f"{shown} (+ eval)" if twin is not None and len(twin) else shown
        out.append(Pickable(name, label, len(series) + (len(twin) if twin is not None else 0)))
    # what was trained on first, then evaluations, then the system's readings; by name
    # within each (the store's order of discovery follows a set's, not the log's)
    order = {"step": 0, "eval": 1}
    return sorted(out, key=lambda p: (order.get(_kind(p.name), 2), p.name))


def _kind(name: str) -> str:
    return "eval" if name.startswith(_EVAL) else "sys" if name.startswith("sys.") else "step"


def extra_spec(key: str, store: Store | None = None) -> PanelSpec:
    """The panel of ``+<series>``: the series, its smoothed copy when it is a per-step
    series, and its eval twin as a line with markers."""
    name = key[len(PREFIX) :]
    title = visible(name, limit=40)
    if name.startswith(_EVAL):  # an eval metric with no training twin
        series: tuple[Series, ...] = (Series(name, "eval", EVAL, connect=True, markers=True),)
    elif name.startswith("sys."):
        series = (Series(name, title, RAW),)
    else:
        series = (
            Series(name, title, RAW),
            Series(name, "smooth", EMA),
            Series(_EVAL + name, "eval", EVAL, connect=True, markers=True),
        )
    return PanelSpec(
        key,
        title,
        series,
        auto_log=True,
        smooth=not name.startswith((_EVAL, "sys.")),
        empty=f"no {title} in this log",
    )


def parse_panels(names: list[str]) -> tuple[str, ...]:
    """``--panel NAME`` given once or more, or comma-separated: panel keys, each once."""
    keys: dict[str, None] = {}
    for raw in names:
        for part in raw.split(","):
            part = part.strip()
            if part:
                keys[PREFIX + part] = None
    return tuple(keys)[:MAX_EXTRA]
