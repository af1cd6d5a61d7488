"""The CUDA-only parts of a step: device time and the allocator's memory counters.

Decided once, at the first step: only when the script itself has initialised CUDA
(the probe never creates a CUDA context on its own). Per step, a timing event is
recorded (the writer turns consecutive events into ``device_time`` once they have
completed). ``torch.cuda.memory_allocated()`` and friends build the allocator's full
statistics dict (tens of µs), so they are read at most every ``memory_every``
seconds and attached to that step only. Nothing here synchronises with the device.
"""

from __future__ import annotations

import sys
from typing import Any

from dltop.probe.readback import DeviceBatch


class CudaStep:
    """Per-step CUDA extras for one device."""

    def __init__(self, torch: Any, device: Any, memory_every: float) -> None:
        self._cuda = torch.cuda
        self.device = device
        self.memory_every = memory_every
        self._next = 0.0
        self._limit: int | None = None

    def step(self, now: float, dev: Any) -> tuple[Any, tuple[int, int, int, int] | None]:
        """``dev`` with a timing event (a bare marker when the step had no device scalars), and
        the memory counters when ``memory_every`` seconds have passed since the last read."""
        if dev is None:
            dev = (DeviceBatch.marker(), [])
        if now < self._next:
            return dev, None
        self._next = now + self.memory_every
        cuda, d = self._cuda, self.device
        if self._limit is None:
            self._limit = int(cuda.get_device_properties(d).total_memory)
        mem = (
            cuda.memory_allocated(d),
            cuda.memory_reserved(d),
            cuda.max_memory_allocated(d),
            self._limit,
        )
        return dev, mem


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
