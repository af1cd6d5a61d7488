"""Device scalars read back to the host without a host-device synchronisation.

Calling ``.item()`` on a CUDA tensor in the training step stalls the CPU until
the GPU has caught up, which throws away the asynchrony that keeps a GPU busy.
Instead, the training thread gathers a step's device scalars into one tensor,
starts a non-blocking copy into pinned host memory and records a CUDA event
after it; the writer thread turns the copy into floats only once
``event.query()`` says it has landed. Nothing here ever calls
``synchronize()``: ``torch.cuda.set_sync_debug_mode("error")`` stays silent.

CPU tensors take the same path but are ready at once (CPU ops are synchronous).
torch is never imported here: every tensor handed in brings its module along.
"""

from __future__ import annotations

import time
from typing import Any

# How long a forced drain (close, crash flush, an item held too long) waits, in all, for
# the copies still in flight: one budget shared by every read-back of that drain.
FORCE_WAIT_S = 2.0


class Deadline:
    """The time limit one forced drain shares among all its read-backs.

    A forced drain with ten stuck read-backs must not wait ten times: every
    :meth:`DeviceBatch.values` given the same ``Deadline`` waits only until ``at``
    (monotonic seconds); past it, a batch still in flight is given up at once and
    counted in ``missed``, and its record is written without its device values.
    Truthy, so it stands wherever the builders' ``force`` flag is expected.
    """

    __slots__ = ("at", "missed")

    def __init__(self, seconds: float = FORCE_WAIT_S, at: float | None = None) -> None:
        now = time.monotonic()
        self.at = now + max(0.0, seconds) if at is None else min(at, now + max(0.0, seconds))
        self.missed = 0

    def __bool__(self) -> bool:
        return True

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())


class DeviceBatch:
    """Scalars of one record on their way to the host.

    ``values()`` returns the floats in the order given, ``None`` while the copy is
    still in flight (unless forced), and ``[]`` when they are lost (the device
    failed, or a forced read timed out): the record is then written without them.
    """

    __slots__ = ("_host", "_event", "_values", "timing_event")

    def __init__(self, tensors: list[Any], timing: bool = False) -> None:
        """Start the copy of ``tensors`` (0-d or 1-d, one device) to the host.

        ``timing=True`` records the event with timing enabled so that the writer
        can also measure device time between consecutive batches.
        """
        import torch

        device = tensors[0].device
        flat = torch.cat(
            [t.detach().reshape(-1).to(device=device, dtype=torch.float64) for t in tensors]
        )
        self._values: list[float] | None = None
        self._event: Any = None
        self.timing_event: Any = None
        self._host: Any = None  # the host copy (a tensor) until its values are read
        if device.type == "cuda":
            self._host = flat.to("cpu", non_blocking=True)  # lands in pinned memory
            ev = torch.cuda.Event(enable_timing=timing)
            ev.record(torch.cuda.current_stream(device))  # the stream the copy was queued on
            self._event = ev
            if timing:
                self.timing_event = ev
        else:
            self._host = flat

    @classmethod
    def marker(cls, device: Any = None) -> DeviceBatch:
        """A batch with no values, only a timing event: device time of a step without device
        scalars, on ``device``'s current stream (``None``: the current device's)."""
        import torch

        self = cls.__new__(cls)
        self._host = None
        self._values = []
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(device))
        self._event = ev
        self.timing_event = ev
        return self

    def ready(self) -> bool:
        """Whether ``values()`` would return without waiting."""
        if self._event is None:
            return True
        try:
            return bool(self._event.query())
        except Exception:  # a device error: the values are lost, do not hold the log back
            self._event = None
            self._values = []
            self._host = None
            return True

    def values(self, force: bool | Deadline = False) -> list[float] | None:
        """The floats, ``None`` while not ready (unless ``force``), ``[]`` when lost.

        ``force`` is ``True`` (wait up to ``FORCE_WAIT_S`` for this batch) or the
        :class:`Deadline` of the forced drain this batch is part of.
        """
        if self._event is not None and not self.ready():
            if not force:
                return None
            timeout = force.left() if isinstance(force, Deadline) else FORCE_WAIT_S
            if not _wait(self, timeout):
                if isinstance(force, Deadline):
                    force.missed += 1
                self._event = None  # given up: never waited for again
                self._values, self._host = [], None
                return []
        if self._host is None:
            return self._values if self._values is not None else []
        try:
            vals = self._host.tolist()
        except Exception:
            vals = []
        self._values, self._host = vals, None
        return vals


def _wait(batch: DeviceBatch, timeout: float) -> bool:
    """Poll ``query()`` instead of ``synchronize()``: bounded, and never a sync the debug mode flags."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while time.monotonic() < deadline:
        if batch.ready():
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return batch.ready()


def elapsed_s(start: Any, end: Any) -> float | None:
    """Seconds between two completed timing events, ``None`` when either cannot tell."""
    if start is None or end is None:
        return None
    try:
        return float(start.elapsed_time(end)) / 1000.0
    except Exception:
        return None


def host_scalar(value: Any) -> Any:
    """A Python number from a number or a host tensor; a device tensor comes back detached.

    Callers check ``is_device(result)`` and batch device tensors through ``DeviceBatch``.
    """
    if isinstance(value, (int, float)):
        return value
    detach = getattr(value, "detach", None)
    if detach is None:
        item = getattr(value, "item", None)  # numpy scalars
        return item() if callable(item) else float(value)
    t = detach()
    if t.device.type == "cpu":
        return t.item()
    return t


def is_device(value: Any) -> bool:
    """Whether ``value`` is a tensor (after ``host_scalar`` only device tensors stay tensors)."""
    return hasattr(value, "device") and hasattr(value, "detach")
