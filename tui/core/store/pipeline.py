"""The one path from decoded records to the rules, and the one read of a log's byte range.

Why: records reached the rules engine from six places (``dltop check`` three ways, the
report's rules, the rules child, ``dltop ls``, the live model), each with its own copy of
"decode, join the sharded grad norms, feed the engine, then the rank timings and the
store", and the order mattered (the join writes the norm into the records the engine
then reads). A fix to that path had to be made, and tested, in each copy. Here it is one
function, :func:`feed`; :func:`feed_engine` is the same call for the live paths, where a
failing rule must not stop the charts; :func:`judge_range` is the one "read bytes
``[0, upto)`` of a log and judge them" loop, shared by the rules child and the report's
fallback. ``tests/sources/test_pipeline.py`` fails when a second module calls the engine's
``feed_many``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ....probe.schema import Records
from ..files.logbytes import read_range
from ..rules import Config, RuleEngine

if TYPE_CHECKING:
    from .runstore import Store


class Reads(Protocol):
    """What else reads a batch beside the rules and the store: a job's grad-norm shares
    (``ranks.shardnorm``), its rank timings (``ranks.compare.RankTimes``). A protocol, so
    that the store's wing never imports the ranks' wing, which builds on it."""

    def feed(self, records: Records) -> None: ...


def feed(
    records: Records,
    engine: RuleEngine | None = None,
    *,
    shares: Reads | None = None,
    times: Reads | None = None,
    store: Store | None = None,
) -> None:
    """One batch to everything that reads it, in the one order that is right: the grad-norm
    shares first (the join writes the norm into the records), then the rules, the rank
    timings and the store. A rule's exception propagates (``dltop check`` and the report
    say it); the live paths use :func:`feed_engine`."""
    if shares is not None:
        shares.feed(records)
    if engine is not None:
        engine.feed_many(records)
    if times is not None:
        times.feed(records)
    if store is not None:
        store.ingest(records)


def feed_engine(engine: RuleEngine | None, records: Records) -> str | None:
    """Feed the rules; a failing rule must not stop the charts, so its error is returned
    (the caller keeps it as ``engine_error`` and stops feeding) instead of raised."""
    if engine is None:
        return None
    try:
        feed(records, engine)
    except Exception as exc:  # a bug in one rule: diagnosis off, data path alive
        return f"rules engine failed: {type(exc).__name__}: {exc}"
    return None


def make_engine(config: Config | None = None) -> tuple[RuleEngine | None, str | None]:
    """A fresh engine, or the reason there is none (a broken config must not stop the
    charts). ``config``: the rules' settings (``rules.Config``); ``None``: the defaults."""
    try:
        return RuleEngine(config), None
    except Exception as exc:
        return None, f"rules engine failed to start: {type(exc).__name__}: {exc}"


def judge_range(
    fd: int,
    upto: int,
    config: Config | None,
    shares: Reads | None,
    chunk_size: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[RuleEngine | None, str | None, int]:
    """The rules over bytes ``[0, upto)`` of the open log ``fd`` (read with ``pread``, so
    the file's position is left alone): (engine, error, offset reached). ``shares``: the
    grad-norm join of a log that is a job's only file (``GradNormJoin().primary()``), as
    the whole-file loop does; None for any other log. ``progress``: called with the
    offset after each chunk."""
    engine, error = make_engine(config)
    off = 0
    if error is not None:
        return engine, error, off
    # the file may be shorter than it was: the offset reached says where it stopped
    for off, recs in read_range(fd, 0, upto, chunk_size, chunk_size):
        if shares is not None:
            shares.feed(recs)
        error = feed_engine(engine, recs)
        if progress is not None:
            progress(off)
        if error is not None:
            break
    return engine, error, off
