"""A panel as data: which store series it draws, each in which style, on which scale.

Why apart from ``panels.py``: the extra panels (``extra_panels``) build these too, and
``panels`` lists theirs beside its own; both import this module, neither the other's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .chartdata import RAW


@dataclass(frozen=True)
class Series:
    """One line of a panel: a store metric, how to draw it, its legend label."""

    metric: str
    label: str
    style: str = RAW
    connect: bool = True
    lead: bool = False  # its value comes first in the legend (a narrow panel cuts the end)
    markers: bool = False  # a mark on each point (evals: a line through them, and where they are)


@dataclass(frozen=True)
class PanelSpec:
    """A panel: which metrics, in which unit, on which scale."""

    key: str
    title: str
    series: tuple[Series, ...]
    unit: str = ""
    log: bool = False  # fixed log scale (grad norm); the loss panel follows ViewState
    # a log axis by itself when the visible values span > 3 decades (ViewState.log_loss
    # None). Only the loss: a time or memory panel starts at zero and reads right on a
    # linear axis, where a data wait of 10 us looks as small as it is (on a log axis it
    # would look as big as the compute)
    auto_log: bool = False
    smooth: bool = False  # a smoothed copy of the first series over it (ViewState.smoothing)
    y_floor: float | None = None
    empty: str = "waiting for data"
    # what the panel draws, for "no <missing> in this Lightning log": another tool's log
    # cannot take the probe's hints (pass model=...); it simply never had the values
    missing: str = ""
