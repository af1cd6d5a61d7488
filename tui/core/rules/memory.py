"""Memory growth: allocated CUDA memory or process RSS that keeps rising with no pull-back.

A leak shows as a steady trend over many steps, not one reading, so the verdict is
windowed (a linear fit over the sampled run) and reports the step where the growth began,
estimated from the fit, not the later step where the rule became sure of it.

Judged in steps or in time, whichever comes first: a leaking run on a busy machine makes
few steps (44 in 30 s) while its memory climbs just as steadily, and the process's RSS is
sampled every second whatever the step rate. Growth is measured against the noise of the
readings around the fitted line, so a small leak (16 MiB) on a quiet, straight line is
named as surely as a large one, and the start-up allocations are left out by steps or by
seconds (``WARM_S``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ....probe.schema import Record, as_float
from ..text.fmt import mib
from ..text.fmt import number as fmt
from .alerts import CRITICAL, WARNING, Severity
from .base import Rule, Tracker
from .window import linear_fit

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

MIB = 1 << 20
WARM_S = 5.0  # seconds of training after which memory readings count, however few steps
SPAN_S = 15.0  # seconds of readings that judge a run, however few steps it made
SMALL_GROWTH = 16 * MIB  # a straight, clean climb this large counts below min_growth ...
NOISE_SIGMAS = 8.0  # ... when it is this many times the readings' scatter around the line
CLEAN_R2 = 0.9  # ... and the line explains this much of them


class MemoryGrowth(Rule):
    """Steady growth of allocated memory (CUDA) or process RSS (CPU) with no pull-back."""

    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("memory_growth")
        self.min_growth = float(c["min_growth_mib"]) * MIB
        self.limit_frac = float(c["limit_fraction"])
        self.min_steps = int(c["min_steps"])
        self.r2 = float(c["r2"])
        self.horizon = float(c["horizon_s"])
        self.pullback = float(c["pullback"])
        self.tr = Tracker(engine, "memory_growth")
        self.source: str | None = None  # "cuda" (step records) or "rss" (sys records)
        self.samples: deque[tuple[int, float, float]] = deque()  # step, t, bytes
        self.stride = 1
        self.seen = 0
        self.start: float | None = None
        self.start_vals: list[float] = []
        self.last: float | None = None
        self.peak: float | None = None
        self.limit: float | None = None
        self.slope: float | None = None  # bytes per step

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, blk: Block) -> None:
        for i in range(len(blk.recs) - 1, -1, -1):  # the block's latest reading
            rec = blk.recs[i]
            v = as_float(rec.get("mem_allocated"))
            if v is None:
                continue
            self.source = "cuda"
            lim = as_float(rec.get("mem_limit"))
            if lim:
                self.limit = lim
            self._sample(e, blk.steps[i], blk.t[i], v)
            return

    def on_sys(self, e: EngineState, rec: Record) -> None:
        if self.source == "cuda":
            return
        rss = as_float(rec.get("rss"))
        if rss is None or e.last_step is None:
            return
        self.source = "rss"
        avail = as_float(rec.get("mem_available"))
        if avail is not None:
            self.limit = rss + avail
        self._sample(e, e.last_step, as_float(rec.get("t")), rss)

    def _warm(self, e: EngineState, t: float | None) -> bool:
        """Past the start-up allocations (model, optimizer state, caches): by steps, or by
        seconds of training on a slow or busy machine."""
        if e.steps >= e.warmup_steps:
            return True
        t0 = e.first_step_t
        return t is not None and t0 is not None and t - t0 >= WARM_S and e.steps >= 5

    def _long_enough(self, e: EngineState) -> bool:
        if e.steps >= self.min_steps:
            return True
        ts = [p[1] for p in self.samples]
        return len(ts) >= 8 and ts[-1] - ts[0] >= SPAN_S

    def _sample(self, e: EngineState, step: int, t: float | None, v: float) -> None:
        self.last = v
        if not self._warm(e, t):
            return  # start-up allocations (model, optimizer state, caches) are not a leak
        if self.start is None:
            self.start_vals.append(v)
            if len(self.start_vals) >= 2:
                self.start = min(self.start_vals)
        self.seen += 1
        if self.seen % self.stride:
            return
        self.samples.append((step, t if t is not None else 0.0, v))
        if self.peak is None or v > self.peak:
            self.peak = v
        if len(self.samples) > 256:  # keep the whole run at half the resolution
            self.samples = deque(list(self.samples)[::2])
            self.stride *= 2
        n = len(self.samples)
        # every sample while they are few (RSS comes at 1 Hz), every 4th once the fit is long
        if n >= 4 and self._long_enough(e) and (n < 32 or self.seen % (4 * self.stride) == 0):
            self._judge(e, step)

    def _onset(self, pts: list[tuple[int, float, float]], slope: float, step: int) -> int:
        """The step the growth began: where the fitted trend line leaves the early level
        (within the sampled span), so a leak that starts midway is dated to its start."""
        first = self.samples[0][0]
        if slope <= 0 or self.start is None:
            return first
        mx = sum(p[0] for p in pts) / len(pts)
        my = sum(p[2] for p in pts) / len(pts)
        x0 = mx - (my - self.start) / slope
        return int(min(max(x0, first), step))

    def _judge(self, e: EngineState, step: int) -> None:
        n = len(self.samples)
        pts = list(self.samples)[n // 2 :] if n >= 16 else list(self.samples)
        slope, r2 = linear_fit([float(p[0]) for p in pts], [p[2] for p in pts])
        self.slope = slope
        if not self.on or self.start is None or self.last is None:
            return
        growth = self.last - self.start
        need = self.min_growth
        if self.source == "cuda" and self.limit:
            need = max(need, self.limit_frac * self.limit)
        peak = self.peak or self.last
        pulled = (peak - self.last) > self.pullback * max(growth, 1.0)
        # a smaller climb of the process's RSS counts when the line is clean: far above the
        # readings' scatter (CUDA memory keeps its device-sized bar: allocated memory may
        # legitimately step up by whole buffers)
        clean = (
            self.source == "rss"
            and growth >= SMALL_GROWTH
            and r2 >= CLEAN_R2
            and growth >= NOISE_SIGMAS * _scatter(pts, slope)
        )
        if (growth >= need or clean) and slope > 0 and r2 >= self.r2 and not pulled:
            onset = step if self.tr.active else self._onset(pts, slope, step)
            sev: Severity = WARNING
            eta = None
            ts = [p[1] for p in pts]
            if self.limit and ts[-1] > ts[0]:
                per_s, _ = linear_fit(ts, [p[2] for p in pts])
                if per_s > 0:
                    eta = (self.limit - self.last) / per_s
                    if eta <= self.horizon:
                        sev = CRITICAL
            what = "allocated CUDA memory" if self.source == "cuda" else "process RSS"
            ev = {
                "source": self.source,
                "mem_start": self.start,
                "mem_last": self.last,
                "growth": growth,
                "growth_per_step": slope,
                "r2": r2,
                "limit": self.limit,
                "seconds_to_limit": eta,
            }
            msg = (
                f"{what} grew {mib(growth)} ({mib(self.start)} -> {mib(self.last)}), "
                f"{fmt(slope / 1024)} KiB per step, steadily (R² {fmt(r2)})"
            )
            if eta is not None:
                msg += f"; the limit is {fmt(eta)} s away at this rate"
            self.tr.fire(onset, sev, "Memory keeps growing", msg, ev, t=e.t, refresh=True)
            self.tr.hold(step)
        elif self.tr.active and (pulled or slope <= 0):
            self.tr.clear(step)


def _scatter(pts: list[tuple[int, float, float]], slope: float) -> float:
    """Robust sigma of the readings around the fitted line (bytes): the median absolute
    residual, scaled; 0 with fewer than 4 readings."""
    if len(pts) < 4:
        return 0.0
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[2] for p in pts) / len(pts)
    res = sorted(abs(p[2] - (my + slope * (p[0] - mx))) for p in pts)
    return 1.4826 * res[len(res) // 2]
