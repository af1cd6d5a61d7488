"""The probe's GPU-path decisions, checked on a machine without a GPU.

Three faults found by reading the CUDA path (issue 34), each shown here with a stand-in
for the GPU, since the CPU build of torch cannot make a CUDA tensor:

- gradients on several devices (a CPU-resident embedding beside CUDA layers) had their
  norms gathered on the first gradient's device: the CPU when that embedding came first,
  so every device norm was copied to the host, a sync in every backward. The ``meta``
  device stands in for the GPU: copying out of it fails, as copying out of CUDA waits.
- ``mem_limit`` was the device's whole memory even under
  ``torch.cuda.set_per_process_memory_fraction`` (the schema says "or the per-process
  cap"; the memory rules project the time to OOM against it).
- the timing marker of a step without device scalars was recorded on the *current*
  device's stream, not the model's (``model.to("cuda:1")`` without ``set_device``).

``scripts/gpu_check.sh`` checks the first two on a real GPU (the OOM demo's ``mem_limit``
is its 768 MiB cap).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dltop.probe.cudastep import CudaStep
from dltop.probe.gradnorm import GradNormTracker
from dltop.probe.readback import DeviceBatch


def _tracker(
    *devices: str, layers: bool = False, dtypes: tuple[torch.dtype, ...] = ()
) -> GradNormTracker:
    params = []
    for i, dev in enumerate(devices):
        dtype = dtypes[i] if dtypes else torch.float32
        p = torch.nn.Parameter(torch.ones(3 + i, device=dev, dtype=dtype))
        p.grad = torch.full((3 + i,), 2.0, device=dev, dtype=dtype)
        params.append((f"p{i}", p))
    tr = GradNormTracker(params)
    tr.want_layers = layers
    return tr


@pytest.mark.parametrize("layers", [False, True])
def test_norms_of_gradients_on_several_devices_are_gathered_on_the_device(layers: bool) -> None:
    """The host-resident gradient comes first: its norm goes to the device, never the
    device's norms to the host (meta: any copy out of it raises, as a CUDA one syncs)."""
    tr = _tracker("cpu", "meta", layers=layers)
    tr._end_of_backward(0)  # what the end-of-backward callback runs
    assert tr.error is None, tr.error
    assert tr.latest is not None and tr.latest.device.type == "meta"
    if layers:
        assert tr.layers is not None


def test_norms_on_the_host_alone_are_still_a_float() -> None:
    tr = _tracker("cpu", "cpu", dtypes=(torch.float32, torch.float64))  # two groups, one device
    tr._end_of_backward(0)
    assert tr.error is None
    assert tr.latest == pytest.approx(float(torch.full((7,), 2.0).norm()))


class _FakeCuda:
    """``torch.cuda`` as CudaStep reads it: counters, the device's memory, the fraction."""

    def __init__(self, total: int = 80 << 30) -> None:
        self.total = total
        self.fraction = 1.0

    def get_device_properties(self, d: Any) -> Any:
        return SimpleNamespace(total_memory=self.total)

    def memory_allocated(self, d: Any) -> int:
        return 1 << 20

    def memory_reserved(self, d: Any) -> int:
        return 2 << 20

    def max_memory_allocated(self, d: Any) -> int:
        return 3 << 20

    def get_per_process_memory_fraction(self, d: Any) -> float:
        return self.fraction


def test_mem_limit_is_the_per_process_cap_once_one_is_set() -> None:
    cuda = _FakeCuda()
    cu = CudaStep(SimpleNamespace(cuda=cuda), torch.device("cuda", 0), memory_every=0.0)
    dev = ("batch", [])  # a step with device values: no marker needed
    _, mem = cu.step(1.0, dev)
    assert mem is not None and mem[3] == 80 << 30
    cuda.fraction = (768 << 20) / (80 << 30)  # the OOM demo's cap, set after the first step
    _, mem = cu.step(2.0, dev)
    assert mem is not None and mem[3] == pytest.approx(768 << 20, abs=1)


def test_mem_limit_without_the_fraction_getter_is_the_device_memory() -> None:
    cuda = _FakeCuda()
    del_getter = SimpleNamespace(
        **{k: getattr(cuda, k) for k in ("get_device_properties", "memory_allocated")},
        memory_reserved=cuda.memory_reserved,
        max_memory_allocated=cuda.max_memory_allocated,
    )
    cu = CudaStep(SimpleNamespace(cuda=del_getter), torch.device("cuda", 0), memory_every=0.0)
    _, mem = cu.step(1.0, ("batch", []))
    assert mem is not None and mem[3] == 80 << 30


def test_the_timing_marker_is_recorded_on_the_models_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    streams: list[Any] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self, stream: Any = None) -> None:
            streams.append(stream)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    cu = CudaStep(SimpleNamespace(cuda=_FakeCuda()), torch.device("cuda", 1), memory_every=9.0)
    cu._next = 99.0  # no memory read: only the marker
    dev, mem = cu.step(1.0, None)
    assert mem is None and isinstance(dev[0], DeviceBatch)
    assert streams == [("stream", torch.device("cuda", 1))]
