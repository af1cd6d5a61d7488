"""The derived figures every rule reads, computed once per block of steps, in one typed place.

Why: medians, window maxima, noise spreads and the "is the loss still improving?" gate
used to be loose attributes of the engine that several rules read and one wrote. Here
they are one object with one writer (:meth:`Figures.push`, called by the engine at each
block end, after the block's rules have judged it against the previous figures) and
typed fields the rules read (``e.fig.loss_med``...).
"""

from __future__ import annotations

from collections import deque

from .evals import EvalTrend
from .window import log_spread, median_of, median_of_sorted, slide_sorted

FIRST_VALUES = 20  # finite losses whose median is "the start" of the run
PROGRESS_BLOCKS = 64  # block medians kept for the progress gate (the first one always)


BLOWN_UP = 10.0  # a first loss this many times the lowest of the first three is a blow-up


def start_level(first: list[float]) -> float | None:
    """Where the run started: the median of its first losses, or, when a blow-up in the
    first steps wrote some of them (a loss at 10x the lowest of the first three: 2.3 ->
    5000 -> 3000 -> ... -> 5 -> 2.3), the median of the losses before it. Else "X % better
    than at the start" and the progress gate measure from the blow-up, and a network stuck
    at chance reads as 97 % better than where it began."""
    if not first:
        return None
    cap = BLOWN_UP * min(first[:3])
    if cap <= 0:
        return median_of(first)
    onset = next((i for i, x in enumerate(first) if x >= cap), None)
    if onset is None:
        return median_of(first)
    return median_of(first[:onset]) if onset else median_of([x for x in first if x < cap])


class Figures:
    """Rolling windows of the finite loss and grad norm and what is derived from them."""

    __slots__ = (
        "loss_win", "gn_win", "loss_seen", "gn_seen", "loss_med", "gn_med", "loss_wmax", "loss_p90",
        "gn_wmax", "gn_p90", "loss_spread", "gn_spread", "loss_first_vals", "loss_first",
        "loss_min", "loss_blocks", "progress_failing", "progress_stalled", "_pblock", "_progress_block",
        "_min_gain", "_total_gain", "_loss_sorted", "_gn_sorted", "evals",
    )  # fmt: skip

    def __init__(
        self,
        loss_window: int,
        gn_window: int,
        progress_block: int,
        progress_min_gain: float,
        progress_total_gain: float,
    ) -> None:
        self.loss_win: deque[float] = deque(maxlen=max(2, loss_window))
        self.gn_win: deque[float] = deque(maxlen=max(2, gn_window))
        # the windows' values in order, kept up to date by slide_sorted (no sort per block)
        self._loss_sorted: list[float] = []
        self._gn_sorted: list[float] = []
        # finite values pushed into the windows so far: "enough samples" is counted here,
        # not as the window's length, so a window set below min_samples / critical_after
        # does not silently switch a rule off
        self.loss_seen = 0
        self.gn_seen = 0
        self.loss_med: float | None = None
        self.gn_med: float | None = None
        self.loss_wmax: float | None = None  # window maxima
        self.loss_p90: float | None = None
        self.gn_wmax: float | None = None
        self.gn_p90: float | None = None
        self.loss_spread = 0.0  # robust sigma of log(value) in the window: how heavy the noise is
        self.gn_spread = 0.0
        self.loss_first_vals: list[float] = []
        self.loss_first: float | None = None
        self.loss_min: float | None = None
        self.loss_blocks: list[float] = []  # block medians of the finite loss (bounded below)
        self.progress_failing = False
        # the recent gain alone (< progress_min_gain over two blocks): the loss is flat now,
        # whatever happened at the start (a blow-up in the first block makes the total
        # gain look large while the model sits at chance)
        self.progress_stalled = False
        self._pblock: list[float] = []
        self._progress_block = max(2, progress_block)
        self._min_gain = progress_min_gain
        self._total_gain = progress_total_gain
        self.evals = EvalTrend()  # the eval loss over time (the engine pushes each eval)

    def push(self, losses: list[float], gns: list[float], steps_in: int = 0) -> None:
        """One block's finite losses and grad norms into the windows; the figures refreshed.

        ``steps_in``: how many steps the run has gone since its first one, so that "the
        start" is its first FIRST_VALUES steps (at least 3 losses), not its first
        FIRST_VALUES records: a log written every 50 steps is long past its start then."""
        if losses:
            self.loss_seen += len(losses)
            s = self._loss_sorted
            slide_sorted(self.loss_win, s, losses)
            self.loss_med = median_of_sorted(s)
            self.loss_wmax = s[-1]
            self.loss_p90 = s[int(0.9 * (len(s) - 1))]
            self.loss_spread = log_spread(s)
            lo = min(losses)
            if self.loss_min is None or lo < self.loss_min:
                self.loss_min = lo
            if self.loss_first is None:
                self.loss_first_vals.extend(losses)
                n = len(self.loss_first_vals)
                if n >= FIRST_VALUES or (n >= 3 and steps_in >= FIRST_VALUES):
                    self.loss_first = start_level(self.loss_first_vals[:FIRST_VALUES])
            pb, size = self._pblock, self._progress_block
            pb.extend(losses)
            while len(pb) >= size:
                self._progress(pb[:size])
                del pb[:size]
        if gns:
            self.gn_seen += len(gns)
            s = self._gn_sorted
            slide_sorted(self.gn_win, s, gns)
            n = len(s)
            self.gn_med = median_of_sorted(s)
            self.gn_wmax = s[-1]
            self.gn_p90 = s[int(0.9 * (n - 1))]
            self.gn_spread = log_spread(s)

    def _progress(self, values: list[float]) -> None:
        """The "still improving?" gate: recent and total gain of the block medians."""
        m = median_of(values)
        if m is None:
            return
        blocks = self.loss_blocks
        blocks.append(m)
        if len(blocks) > PROGRESS_BLOCKS:
            del blocks[1:2]  # keep the first block: it is the "start" level
        if len(blocks) >= 2:
            ref = blocks[-3] if len(blocks) >= 3 else blocks[0]
            recent_gain = (ref - m) / abs(ref) if ref else 0.0
            first = blocks[0]
            if self.loss_first is not None and self.loss_first < first:
                first = self.loss_first  # a blow-up in the first block is not "the start"
            total_gain = (first - m) / abs(first) if first else 0.0
            self.progress_stalled = recent_gain < self._min_gain
            self.progress_failing = self.progress_stalled and total_gain < self._total_gain
