"""Data-loader bound: the share of each step the training loop spends waiting for data.

A timing rule: it ignores steps inside declared phases and the first step after one, whose
step time includes the evaluation or checkpoint, so a slow eval does not read as a slow
loader. The verdict is windowed and reports the step where the waiting began, estimated
from the window, not the later step where the rule became sure of it.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import repeat
from operator import truediv
from typing import TYPE_CHECKING, Any

from ....probe.schema import as_float
from ..text.fmt import number as fmt
from .alerts import CRITICAL, WARNING, Severity
from .base import Rule, Tracker
from .window import median_of

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

_FLOATS = {float}
_ZERO = 0.0


class DataBound(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("data_bound")
        self.warn, self.crit = float(c["warn"]), float(c["critical"])
        self.min_steps = int(c["min_steps"])
        self.min_dt = float(c["min_data_time"])
        self.checks = max(1, int(c["checks"]))
        n = max(1, int(c["window"]))
        self.share: deque[float] = deque(maxlen=n)
        self.share_steps: deque[int] = deque(maxlen=n)  # the step of each share
        self.dt: deque[float] = deque(maxlen=n)
        self.st: deque[float] = deque(maxlen=n)
        self.tr = Tracker(engine, "data_bound")
        self.hits = 0
        self.hit_start: int | None = None
        self.pushed = 0

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, blk: Block) -> None:
        pushed = 0
        recs = blk.recs
        n = len(recs)
        # map() over dict.get / operator functions rather than comprehensions: this runs at
        # every block end; the same values come out (see the comments on each check)
        dts: list[Any] = list(map(dict.get, recs, repeat("data_time", n)))
        sts: list[Any] = list(map(dict.get, recs, repeat("step_time", n)))
        new: list[float] = []  # this block's shares
        if (
            set(map(type, dts)) == _FLOATS  # all(type(x) is float ...) on a non-empty block
            and set(map(type, sts)) == _FLOATS
            and all(map(_ZERO.__lt__, sts))  # x > 0 (False for NaN)
            and all(blk.timing)
        ):
            # the common case in one pass; a block with a NaN, an infinite or a negative
            # data time (a ratio that is not in [0, inf)) goes the per-step way below,
            # which skips those steps
            q = list(map(truediv, dts, sts))
            if all(map(_ZERO.__le__, q)) and math.inf not in q:  # x == x, 0 <= x < inf
                new = [x if x < 1.0 else 1.0 for x in q]  # min(1.0, x)
                self.share_steps.extend(blk.steps)
                self.dt.extend(dts)
                self.st.extend(sts)
                pushed = len(new)
                dts = []
        for step, rec, ok in zip(blk.steps, recs if dts else [], blk.timing, strict=False):
            dt, st = rec.get("data_time"), rec.get("step_time")
            if dt is None or st is None or not ok:
                continue
            if type(dt) is not float or type(st) is not float:
                dt, st = as_float(dt), as_float(st)
                if dt is None or st is None:
                    continue
            if not (st > 0) or not (dt >= 0) or dt - dt != 0.0:
                continue
            new.append(min(1.0, dt / st))
            self.share_steps.append(step)
            self.dt.append(dt)
            self.st.append(st)
            pushed += 1
        self.share.extend(new)
        before = self.pushed
        self.pushed += pushed
        if not pushed or self.pushed < self.min_steps or self.pushed // 10 == before // 10:
            return  # judged every 10 timed steps
        if not self.on:
            return
        # no share at the bar: the median is below it too (no sort; the usual healthy run)
        share = (median_of(self.share) or 0.0) if max(self.share) >= self.warn else -1.0
        if share >= self.warn and (median_of(self.dt) or 0.0) >= self.min_dt:
            if self.hits == 0:
                self.hit_start = self._onset()
            self.hits += 1
        else:
            self.hits = 0
            if self.tr.active:
                self.tr.clear(e.step)
            return
        if self.hits >= self.checks:
            sev: Severity = CRITICAL if share >= self.crit else WARNING
            med_dt = median_of(self.dt) or 0.0
            med_st = median_of(self.st) or 0.0
            ev = {
                "data_wait_share": share,
                "data_time_median": med_dt,
                "step_time_median": med_st,
                "window": len(self.share),
            }
            msg = (
                f"the loop waits for data {fmt(100 * share)} % of each step (median over "
                f"{len(self.share)} steps: {fmt(med_dt)} s of {fmt(med_st)} s)"
            )
            self.tr.fire(self.hit_start, sev, "Data-loader bound", msg, ev, t=e.t, refresh=True)
            self.tr.hold(e.step)

    def _onset(self) -> int | None:
        """The step where the waiting began: the start of the window's suffix in which steps
        at or above ``warn`` outnumber the others by the most (a one-sided CUSUM change
        point). A run bound from the start gets the window's first step; a loader that
        slowed down midway gets the step it slowed down, not the step the median crossed.
        """
        best, best_i, acc = 0.0, 0, 0.0
        shares = self.share
        for i in range(len(shares) - 1, -1, -1):
            acc += 1.0 if shares[i] >= self.warn else -1.0
            if acc >= best:
                best, best_i = acc, i
        return self.share_steps[best_i] if self.share_steps else None
