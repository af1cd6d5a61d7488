"""A sharded job's per-step sums of its ranks' grad-norm shares, and one rank's shares as
they travel back from a worker process.

Why apart from ``shardnorm.py``: on 64 ranks x 100 k steps the parent of ``dltop check``
sums 6.3 M shares while two workers read the other ranks on 2 CPUs, so each share it
touches is taken from the workers. As dicts a rank's 100 k shares cost ~10 ms to unpickle
and ~11 ms to add in, ~1.3 s of the parent's CPU in all; as an array of 8-byte floats
(:class:`Packed`) added to a list in one ``map(add, ...)`` (:class:`ShareSums`), ~3 ms.
The usual job takes that way: every rank logs the same run of steps. Anything else
(a rank that skipped or repeated steps, a restart, more steps than the cap) is summed
per step in dicts, as before. Each step's sum is the same float either way: the first
rank's share, plus the second's, and so on in rank order.

No Textual, no torch.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from itertools import count, repeat
from operator import add, eq


class Packed:
    """One rank's last share per step, in the order the steps came: a contiguous run of
    steps is kept as its first step, any other set of steps as an ``int64`` array; the
    shares as a ``double`` array (a share is always a float: ``schema.as_float``)."""

    __slots__ = ("first", "steps", "values")

    def __init__(self, shares: dict[int, float]) -> None:
        steps = list(shares)
        first = steps[0] if steps else 0
        self.values = array("d", list(shares.values()))  # from a list: 35 % faster
        self.first: int | None = None
        self.steps: array[int] | None = None
        # a run of steps, checked without a list of the run (a million steps: 36 MB)
        if not steps or (steps[-1] == first + len(steps) - 1 and all(map(eq, steps, count(first)))):
            self.first = first
        else:
            self.steps = array("q", steps)  # |step| < schema.MAX_STEP = 2**62

    def __len__(self) -> int:
        return len(self.values)

    def __getstate__(self) -> tuple[int | None, array[int] | None, array[float]]:
        return self.first, self.steps, self.values

    def __setstate__(self, state: tuple[int | None, array[int] | None, array[float]]) -> None:
        self.first, self.steps, self.values = state

    def items(self) -> Iterator[tuple[int, float]]:
        """(step, share) in the order the rank gave them."""
        if self.first is not None:
            return zip(range(self.first, self.first + len(self.values)), self.values, strict=True)
        assert self.steps is not None
        return zip(self.steps, self.values, strict=True)


class ShareSums:
    """Per step: how many ranks gave a share and their sum, for at most ``cap`` steps.

    Dense while every rank added is the same contiguous run of steps (``first`` and a list
    of sums, each of ``dense_ranks`` shares); dicts from the first rank that is not."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.first = 0  # while dense: the sums are of the steps first, first + 1, ...
        self.dense: list[float] = []
        self.dense_ranks = 0
        self.sums: dict[int, float] = {}
        self.counts: dict[int, int] = {}

    def add(self, packed: Packed) -> None:
        """One rank's shares (ranks in order: the sums are floats, their order their value)."""
        n = len(packed)
        if not n:
            return  # nothing to add (and no empty "run" for the next ranks to match)
        if packed.first is not None and n <= self.cap and not self.sums:
            if not self.dense_ranks:
                self.first, self.dense, self.dense_ranks = packed.first, list(packed.values), 1
                return
            if packed.first == self.first and n == len(self.dense):
                self.dense = list(map(add, self.dense, packed.values))
                self.dense_ranks += 1
                return
        self.add_items(packed.items())

    def add_items(self, items: Iterable[tuple[int, float]]) -> None:
        """One rank's shares, step by step (a step past the cap is left out)."""
        self._spill()
        sums, counts, cap = self.sums, self.counts, self.cap
        for step, v in items:
            if step in sums:
                sums[step] += v
                counts[step] += 1
            elif len(sums) < cap:
                sums[step] = v
                counts[step] = 1

    def get(self, step: int) -> tuple[int, float]:
        """(ranks that gave a share of ``step``, their sum); (0, 0.0) for none."""
        if self.dense_ranks:
            i = step - self.first
            if 0 <= i < len(self.dense):
                return self.dense_ranks, self.dense[i]
            return 0, 0.0
        return self.counts.get(step, 0), self.sums.get(step, 0.0)

    def _spill(self) -> None:
        """Dense sums into the dicts, to go on step by step."""
        if not self.dense_ranks:
            return
        steps = range(self.first, self.first + len(self.dense))
        self.sums = dict(zip(steps, self.dense, strict=True))
        self.counts = dict(zip(steps, repeat(self.dense_ranks)))
        self.first, self.dense, self.dense_ranks = 0, [], 0
