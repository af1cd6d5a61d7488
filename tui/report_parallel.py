"""``dltop report`` on one big log: the charts' store built here while a child process
runs the rules over the same lines (``tui/core/sources/rules_worker.py``).

Why: a report needs both the rules and the store of every record, and in one process
they come one after the other (a 1 M-step log: ~7 s of rules, then ~3 s of store). They
share nothing but the records, so with a second CPU the child reads the file up to a
line end chosen when it starts, this process builds the store from the same bytes, and
the child's engine is then fed the lines after that point with everything else: every
record reaches the engine once, in order, as in one process. A child that fails leaves
its part to this process, which reads those lines again for the rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from ..probe.decoding import LineDecoder
from .core.ranks import compare as ranks
from .core.ranks import shardnorm
from .core.rules import Config, RuleEngine
from .core.sources import rules_worker
from .core.store import pipeline
from .core.store.pipeline import judge_range
from .core.store.runstore import Store


def store_then_engine(
    f: IO[bytes],
    job: rules_worker.RulesJob,
    dec: LineDecoder,
    store: Store,
    config: Config,
    times: ranks.RankTimes | None,
    shares: shardnorm.RankShares | None,
    on_bytes: Callable[[int], None] | None,
    chunk_size: int,
) -> RuleEngine:
    """Read ``f`` up to the child's line end into the store (and ``times``, ``shares``, as
    the whole-file loop does), then return the engine through those lines: the child's,
    or one built here when the child failed. ``f`` is left at ``job.upto``."""
    done = 0
    while done < job.upto and (chunk := f.read(min(chunk_size, job.upto - done))):
        done += len(chunk)
        pipeline.feed(dec.feed(chunk), shares=shares, times=times, store=store)
        if on_bytes is not None:
            job.poll(0)  # the child's progress: the slower of the two is how far we are
            on_bytes(min(done, job.reached))
    got = rules_worker.wait_engine(job, on_bytes)
    if got is not None and got[0] is not None and got[1] is None and done == job.upto:
        return got[0]
    return _engine_here(f.fileno(), done, config, shares is not None, chunk_size)


def _engine_here(fd: int, upto: int, config: Config, join: bool, chunk_size: int) -> RuleEngine:
    """The rules over ``[0, upto)``, read again here: what the child should have given
    (a job's only file joins its own grad-norm shares, as the whole-file loop does)."""
    shares = shardnorm.GradNormJoin().primary() if join else None
    engine, error, _ = judge_range(fd, upto, config, shares, chunk_size)
    if engine is None or error is not None:
        raise RuntimeError(error or "no rules engine")  # as a failing rule raises in check
    return engine
