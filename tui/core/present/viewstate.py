"""What the person chose on the dashboard (window, cursor, scales, picked panels).

Why apart from ``view_model.py``: the panels and the header compute from it, and the
view model imports both; with the state here, none of them imports the view model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.smoothing import DEFAULT_WEIGHT


@dataclass(frozen=True)
class ViewState:
    """What the person chose: window, cursor, scales. The app owns one and replaces it."""

    window: tuple[int, int] | None = None  # None: follow the whole run
    cursor: int | None = None
    log_loss: bool | None = None  # None: linear, or log by itself over > 3 decades
    smoothing: float = DEFAULT_WEIGHT  # the smoothed line's weight per step; 0: off
    panels: tuple[str, ...] = ()  # picked panels (``+acc``: extra_panels), in order
    paused: bool = False
    selected: str | None = None  # alert key
    x_axis: str = "step"  # "step", or "time": columns uniform in elapsed wall time (`t`)
