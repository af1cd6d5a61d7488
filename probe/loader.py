"""``probe.loader(iterable)``: how long the training loop waits for its data.

The time spent blocked in ``next()`` is the one number that tells a data-bound
run from a compute-bound one; it is summed between steps and attached to the
next ``step`` record as ``data_time``. The batch size is inferred from the
first dimension of the batch (or of its first tensor-like element) and summed
over the batches fetched since the last step (gradient accumulation: K loader
batches per ``probe.step()``), so that the probe can report samples/s; an
explicit ``batch_size=`` in ``step()`` wins.

It also tells the heartbeats where the loop is (``whereabouts.py``): ``data_wait`` while
blocked in ``next()``, then ``forward`` (``compute`` when the probe has no model) once
the batch is handed out, ``outside_loop`` when the loader is exhausted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from time import perf_counter
from typing import Any, Generic, Protocol, TypeVar

from .whereabouts import DATA_WAIT, OUTSIDE_LOOP, Whereabouts

T = TypeVar("T")


class LoaderClock(Protocol):
    """What the loader writes into the probe (``Probe`` is one): the data wait summed
    until the next step, the batch's hand-out time and size, the loop's whereabouts.
    Declared here so the loader needs nothing from ``probe.py``, which imports it."""

    _where: Whereabouts
    _batch_place: str
    _data_wait: float
    _batch_t: float
    _loader_bs: int | None

    def _loader_started(self, t0: float) -> None: ...


def batch_size_of(batch: Any) -> int | None:
    """The first dimension of a batch, looking one level into tuples, lists and dicts.

    Only ``.shape`` is read (host metadata, never a device sync). Anything that fails on
    the way (a nested tensor's ``.shape`` raises, a dict subclass's ``values()`` may) means
    "unknown": the batch reaches the training loop all the same.
    """
    try:
        shape = getattr(batch, "shape", None)
        if shape is None:
            if isinstance(batch, (tuple, list)):
                first = batch[0] if batch else None
            elif isinstance(batch, dict):
                first = next(iter(batch.values()), None)
            else:
                return None
            shape = getattr(first, "shape", None)
            if shape is None:
                return None
        return int(shape[0]) if len(shape) else None
    except Exception:
        return None


class TimedLoader(Generic[T]):
    """Wraps any iterable; each iteration pass times every ``next()``."""

    def __init__(
        self, iterable: Iterable[T], probe: LoaderClock, infer_batch_size: bool = True
    ) -> None:
        self.iterable = iterable
        self._probe = probe
        self._infer = infer_batch_size

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # dataset, sampler, batch_size... of a wrapped DataLoader stay reachable
        if name == "iterable":
            raise AttributeError(name)
        return getattr(self.iterable, name)

    def __iter__(self) -> Iterator[T]:
        probe = self._probe
        infer = self._infer
        where = probe._where  # the heartbeats' `where` (whereabouts.py): two stores a move
        batch_place = probe._batch_place
        t0 = perf_counter()
        probe._loader_started(t0)
        where.since = t0
        where.place = DATA_WAIT
        it = iter(self.iterable)  # a DataLoader starts its workers here: part of the wait
        while True:
            try:
                batch = next(it)
            except StopIteration:
                t1 = perf_counter()
                probe._data_wait += t1 - t0
                where.since = t1  # the loop over the batches is over
                where.place = OUTSIDE_LOOP
                return
            t1 = perf_counter()
            probe._data_wait += t1 - t0
            probe._batch_t = t1  # batch ready: the step's forward starts here
            where.since = t1
            where.place = batch_place
            if infer and (bs := batch_size_of(batch)) is not None:
                # summed until the next probe.step(): K micro-batches of gradient
                # accumulation make one step of K times the samples
                prev = probe._loader_bs
                probe._loader_bs = bs if prev is None else prev + bs
            yield batch
            t0 = perf_counter()
            where.since = t0
            where.place = DATA_WAIT
