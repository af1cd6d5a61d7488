"""The CUDA-only parts of a step: device time and the allocator's memory counters.

Decided once, at the first step: only when the script itself has initialised CUDA
(the probe never creates a CUDA context on its own). Per step, a timing event is
recorded (the writer turns consecutive events into ``device_time`` once they have
completed). ``torch.cuda.memory_allocated()`` and friends build the allocator's full
statistics dict (tens of µs), so they are read at most every ``memory_every``
seconds and attached to that step only. ``mem_limit`` is what this process may take: the
device's memory, times the per-process fraction when one is set
(``torch.cuda.set_per_process_memory_fraction``, read again at each memory read: a cap set
after the first step counts). Nothing here synchronises with the device.
"""

from __future__ import annotations

import sys
from typing import Any

from .readback import DeviceBatch


class CudaStep:
    """Per-step CUDA extras for one device."""

    def __init__(self, torch: Any, device: Any, memory_every: float) -> None:
        self._cuda = torch.cuda
        self.device = device
        self.memory_every = memory_every
        self._next = 0.0
        self._total: int | None = None

    def step(self, now: float, dev: Any) -> tuple[Any, tuple[int, int, int, int] | None]:
        """``dev`` with a timing event (a bare marker when the step had no device scalars), and
        the memory counters when ``memory_every`` seconds have passed since the last read."""
        if dev is None:
            # on the model's device: the current device's stream (cuda:0 when the script
            # never called set_device) would time an idle GPU, and open a context on it
            dev = (DeviceBatch.marker(self.device), [])
        if now < self._next:
            return dev, None
        self._next = now + self.memory_every
        cuda, d = self._cuda, self.device
        if self._total is None:
            self._total = int(cuda.get_device_properties(d).total_memory)
        mem = (
            cuda.memory_allocated(d),
            cuda.memory_reserved(d),
            cuda.max_memory_allocated(d),
            self._limit(),
        )
        return dev, mem

    def _limit(self) -> int:
        """The device's memory, or the share of it this process is capped at."""
        total = self._total or 0
        fraction = getattr(self._cuda, "get_per_process_memory_fraction", None)
        if fraction is None:  # torch < 2.5 has no getter
            return total
        try:
            f = float(fraction(self.device))
        except Exception:
            return total
        return int(total * f) if 0.0 < f < 1.0 else total


def cuda_step_for(model: Any, memory_every: float) -> CudaStep | None:
    """A :class:`CudaStep` when the training uses CUDA, else ``None``."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    device = None
    if model is not None:
        for p in model.parameters():
            if p.device.type == "cuda":
                device = p.device
                break
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return CudaStep(torch, device, memory_every)
