"""Rules that take closed blocks in runs, not one at a time: the engine's batch path.

Why: most of the engine's time is in the rules' block hooks, each doing per-value Python
work ten steps at a time (``benchmarks/rules_speed.py --by-part``). A rule with a batch
path (``Rule.on_blocks``) is handed the blocks closed since it last ran, up to
``FLUSH_AT`` of them within one ``feed_many``, and takes in one pass every block that
changes none of its alerts; the first block that may change one goes through its
``on_block`` as before, with the engine's state as it was at that block's end
(:class:`Closed`), and the batch goes on after it.

The answers are those of one block at a time, by construction:
- a batched rule reads of the engine only what a :class:`Closed` holds, and defines no
  hook but ``on_block`` (``tests/rules/test_rules_batched.py`` reads its source);
- ``on_blocks`` never touches the sink: it returns how many blocks it took, all quiet;
- the sink's order is kept: before any alert is added (``AlertSink.before_add``), every
  batched rule is brought up to where it would have run by then: through the block whose
  hooks are running if it comes before the adding rule in the engine's order, else
  through the block before. Revisions of an alert already raised do not move it.
A block closed outside ``feed_many`` (``feed``, one record) is run at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Rule
    from .state import EngineState
    from .window import Block

BATCH_MIN = 16  # fewer blocks than this go one at a time (a live tick): numpy costs more
FLUSH_AT = 1024  # blocks held at most (their lists and records stay alive while held)


@dataclass(frozen=True, slots=True)
class Closed:
    """A closed block and the engine's state at its end: what a batched rule may read."""

    blk: Block
    step: int
    steps: int
    t: float | None
    lr: float | None
    in_grace: bool


class Deferred:
    """The blocks closed and not yet given to every batched rule, and the giving."""

    __slots__ = ("rules", "ranks", "pending", "taken", "wait", "span", "busy")

    def __init__(self, rules: list[tuple[int, Rule]]) -> None:
        self.rules = [r for _, r in rules]
        self.ranks = [rank for rank, _ in rules]  # positions in the engine's list of rules
        self.pending: list[Closed] = []
        self.taken = [0] * len(rules)  # per rule: pending blocks it has been given
        # per rule, how its batches are cut (speed only, never an answer): after a batch
        # that stopped short, ``BATCH_MIN`` blocks one at a time before the next try (an
        # alert episode keeps a rule off its batch path for a while), and the most blocks
        # one try may look at, doubled after each batch taken whole (a try that stops
        # early has looked at the rest for nothing)
        self.wait = [0] * len(rules)
        self.span = [BATCH_MIN] * len(rules)
        self.busy = False  # giving now: a batched rule's own alert must not start it again

    def add(self, e: EngineState, blk: Block) -> None:
        self.pending.append(Closed(blk, e.step, e.steps, e.t, e.lr, e.in_grace))

    def run(self, e: EngineState, hook_rank: int | None = None) -> None:
        """Give every batched rule the pending blocks: all of them, or, while the block
        hooks of the rule at ``hook_rank`` run on the last one, that block only to the
        rules before it."""
        if self.busy or not self.pending:
            return
        self.busy = True
        try:
            self._run(e, hook_rank)
        finally:
            self.busy = False

    def _batch(self, e: EngineState, i: int, lim: int) -> int:
        """Rule ``i`` takes what it can of the pending blocks before ``lim`` at once."""
        k = self.taken[i]
        while not self.wait[i] and lim - k >= BATCH_MIN:
            give = min(lim - k, self.span[i])
            got = self.rules[i].on_blocks(e, self.pending[k : k + give])
            k += got
            if got < give:
                self.wait[i], self.span[i] = BATCH_MIN, BATCH_MIN
                break
            self.span[i] = min(2 * give, FLUSH_AT)
        self.taken[i] = k
        return k

    def _run(self, e: EngineState, hook_rank: int | None) -> None:
        pending, taken, wait, rules = self.pending, self.taken, self.wait, self.rules
        n = len(pending)
        limits = [n if hook_rank is None or rank < hook_rank else n - 1 for rank in self.ranks]
        while True:
            nxt = n
            for i in range(len(rules)):
                k = self._batch(e, i, limits[i])
                if k < limits[i] and k < nxt:
                    nxt = k
            if nxt == n:
                break
            c = pending[nxt]  # the first block some rule takes the one-at-a-time way
            saved = (e.step, e.steps, e.t, e.lr, e.in_grace)
            e.step, e.steps, e.t, e.lr, e.in_grace = c.step, c.steps, c.t, c.lr, c.in_grace
            try:
                for i, rule in enumerate(rules):
                    if taken[i] == nxt and limits[i] > nxt:
                        rule.on_block(e, c.blk)
                        taken[i] = nxt + 1
                        if wait[i]:
                            wait[i] -= 1
            finally:
                e.step, e.steps, e.t, e.lr, e.in_grace = saved
        if all(k == n for k in taken):
            pending.clear()
            self.taken = [0] * len(rules)
