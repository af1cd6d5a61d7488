"""The system sampler (dltop.probe.system) and its NVML wrapper (dltop.probe.nvml).

The real psutil and the real pynvml are used throughout. This machine has no GPU, so
the real pynvml fails to initialise here; to exercise a GPU that works and then stops
working, a one-GPU stand-in answers NVML's questions until the "driver is lost", after
which every call goes to the real, uninitialised pynvml and fails with NVML's own error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from dltop.probe.decoding import read_records
from dltop.probe.nvml import Nvml
from dltop.probe.schema import EV_WARNING, EVENT, SYS
from dltop.probe.system import SystemSampler, gpu_status


def _real_nvml_works() -> bool:
    return Nvml().init()


REAL_GPU = _real_nvml_works()


class StandInGpu:
    """A one-GPU NVML: the pynvml API surface the wrapper uses, with pynvml's errors."""

    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, unsupported: tuple[str, ...] = ()) -> None:
        self.lost = False
        self.unsupported = set(unsupported)
        self.calls = 0

    def _answer(self, name: str, value: Any, *args: Any) -> Any:
        self.calls += 1
        if self.lost:  # the real library, uninitialised: raises NVMLError_Uninitialized
            return getattr(pynvml, name)(*args)
        if name in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"handle{i}"

    def nvmlDeviceGetName(self, handle: Any) -> bytes:
        return b"Stand-in GPU"

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        mem = SimpleNamespace(used=3 << 30, total=80 << 30)
        return self._answer("nvmlDeviceGetMemoryInfo", mem, handle)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return self._answer("nvmlDeviceGetUtilizationRates", SimpleNamespace(gpu=37), handle)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._answer("nvmlDeviceGetTemperature", 55, handle, sensor)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._answer("nvmlDeviceGetPowerUsage", 123_456, handle)


class Collector:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, rec: dict[str, Any]) -> None:
        with self.lock:
            self.records.append(rec)
            self.threads.add(threading.current_thread().name)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.records if r["kind"] == kind]

    def wait_for(self, pred: Any, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out; got {self.records}")


def test_sampler_emits_process_records_from_its_own_thread() -> None:
    out = Collector()
    sampler = SystemSampler(out, interval=0.1)
    sampler.start()
    try:
        out.wait_for(lambda: len(out.of_kind(SYS)) >= 4)
    finally:
        sampler.stop()
    recs = out.of_kind(SYS)
    assert out.threads == {"dltop-sampler"}  # the caller's thread never samples
    for rec in recs:
        assert isinstance(rec["t"], float)
        assert isinstance(rec["rss"], int) and rec["rss"] > 10 << 20  # a Python process
        assert isinstance(rec["cpu_percent"], float) and rec["cpu_percent"] >= 0.0
        assert 0 < rec["mem_available"] <= rec["mem_total"]
        if REAL_GPU:
            assert rec["gpus"] and all("mem_total" in g for g in rec["gpus"])
        else:
            assert "gpus" not in rec  # absent, not zeros
    ts = [r["t"] for r in recs]
    assert ts == sorted(ts)
    assert sampler.samples == len(recs)


def test_cpu_percent_sees_a_busy_training_thread() -> None:
    """The samples' CPU share, integrated over their intervals, accounts for the CPU time
    a busy thread burned. Burning a fixed CPU time (not a fixed wall time) and comparing
    seconds with seconds holds on a loaded machine too, where the thread gets a third of a
    core and a share threshold (it once read 19.6 % against 20) does not."""
    out = Collector()
    sampler = SystemSampler(out, interval=0.2)
    sampler.start()
    burned = 0.0
    try:
        time.sleep(0.3)  # a first sample before the burn: its interval starts the count
        p0, deadline = time.process_time(), time.monotonic() + 60.0
        x = 0
        while time.process_time() - p0 < 1.0 and time.monotonic() < deadline:
            x += sum(range(1000))  # burn CPU on this thread, like a training step
        burned = time.process_time() - p0
        time.sleep(0.5)  # a sample after the burn closes its interval
    finally:
        sampler.stop()
    recs = [r for r in out.of_kind(SYS) if "cpu_percent" in r]
    seen = sum(
        b["cpu_percent"] / 100 * (b["t"] - a["t"]) for a, b in zip(recs, recs[1:], strict=False)
    )
    assert burned >= 0.9 and seen >= 0.5 * burned, (burned, seen, recs)


def test_stop_wakes_the_thread_out_of_a_long_interval() -> None:
    sampler = SystemSampler(Collector(), interval=60.0)
    sampler.start()
    thread = sampler._thread
    assert thread is not None and thread.is_alive() and thread.daemon
    sampler.stop(timeout=10.0)
    assert not thread.is_alive()
    assert sampler.samples == 0


def test_start_twice_runs_one_thread() -> None:
    sampler = SystemSampler(Collector(), interval=0.1)
    sampler.start()
    first = sampler._thread
    sampler.start()
    try:
        assert sampler._thread is first
        assert sum(t.name == "dltop-sampler" for t in threading.enumerate()) == 1
    finally:
        sampler.stop()


@pytest.mark.skipif(REAL_GPU, reason="this machine has a working NVML")
def test_gpu_status_without_a_driver_gives_one_note_with_the_reason() -> None:
    devices, note = gpu_status()
    assert devices == []
    assert note is not None and note.startswith("no NVIDIA GPU: NVML unavailable (")
    assert note.endswith("GPU metrics are N/A")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        assert str(e) in note  # the driver's own words, not a guess


def test_stand_in_gpu_is_sampled_with_every_field() -> None:
    session = Nvml(lib=StandInGpu())
    assert session.init() and session.reason is None
    assert session.devices() == [
        {"type": "cuda", "index": 0, "name": "Stand-in GPU", "mem_total": 80 << 30}
    ]
    (gpu,) = session.sample()
    assert gpu == {
        "index": 0,
        "name": "Stand-in GPU",
        "mem_used": 3 << 30,
        "mem_total": 80 << 30,
        "util": 37.0,
        "temp": 55.0,
        "power_w": 123.456,
    }


def test_unsupported_field_is_dropped_and_not_asked_again() -> None:
    lib = StandInGpu(unsupported=("nvmlDeviceGetPowerUsage",))
    session = Nvml(lib=lib)
    assert session.init()
    (gpu,) = session.sample()
    assert "power_w" not in gpu and gpu["util"] == 37.0
    calls = lib.calls
    session.sample()
    assert lib.calls == calls + 3  # memory, util, temp; power no longer asked
    assert session.ok


def test_visible_devices_select_and_reorder_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    class TwoGpus(StandInGpu):
        def nvmlDeviceGetCount(self) -> int:
            return 2

        def nvmlDeviceGetName(self, handle: Any) -> bytes:
            return handle.encode()

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")  # 7 does not exist: CUDA stops there
    session = Nvml(lib=TwoGpus())
    assert session.init()
    assert [(g["index"], g["name"]) for g in session.sample()] == [(0, "handle1")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hidden = Nvml(lib=TwoGpus())
    assert not hidden.init() and "CUDA_VISIBLE_DEVICES" in (hidden.reason or "")


def test_nvml_failing_mid_run_degrades_once_and_sampling_goes_on() -> None:
    lib = StandInGpu()
    out = Collector()
    sampler = SystemSampler(out, interval=0.05, nvml_session=Nvml(lib=lib))
    sampler.start()
    try:
        out.wait_for(lambda: sum("gpus" in r for r in out.of_kind(SYS)) >= 2)
        lib.lost = True
        out.wait_for(lambda: out.of_kind(EVENT))
        n = len(out.of_kind(SYS))
        out.wait_for(lambda: len(out.of_kind(SYS)) >= n + 4)  # still alive, still sampling
        calls = lib.calls
    finally:
        sampler.stop()
    (warning,) = out.of_kind(EVENT)  # one warning, not one per sample
    assert warning["type"] == EV_WARNING and warning["source"] == "nvml"
    assert "NVML failed (Uninitialized)" in warning["message"]
    after = out.of_kind(SYS)[-4:]
    assert all("gpus" not in r and r["rss"] > 0 for r in after)
    assert lib.calls == calls  # a dead NVML is not asked again


@pytest.mark.skipif(not REAL_GPU, reason="needs a working NVML driver")
def test_real_nvml_shutdown_mid_run_degrades() -> None:
    out = Collector()
    session = Nvml()
    sampler = SystemSampler(out, interval=0.05, nvml_session=session)
    sampler.start()
    try:
        out.wait_for(lambda: any("gpus" in r for r in out.of_kind(SYS)))
        pynvml.nvmlShutdown()  # balances the wrapper's nvmlInit: NVML is now uninitialised
        out.wait_for(lambda: out.of_kind(EVENT))
    finally:
        sampler.stop()
    assert not session.ok and len(out.of_kind(EVENT)) == 1


def test_without_psutil_and_nvml_nothing_is_emitted_and_nothing_raises() -> None:
    code = """
import sys, time, threading
sys.modules["psutil"] = None  # an environment without psutil
errors = []
threading.excepthook = lambda args: errors.append(args)
from dltop.probe.system import SystemSampler
out = []
s = SystemSampler(out.append, interval=0.05)
s.start(); time.sleep(0.5); s.stop()
gpu = [r for r in out if "gpus" in r]
print(len(out) - len(gpu), len(errors), s._thread.is_alive())
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "0", "False"]


@pytest.mark.slow
def test_real_training_log_has_sys_records_and_one_no_gpu_note(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    script = Path(__file__).resolve().parents[1] / "crash_scripts" / "tiny_train.py"
    res = subprocess.run(
        [sys.executable, str(script), "sys", str(log)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    records, dec = read_records(str(log))
    assert dec.malformed == 0
    meta, last = records[0], records[-1]
    assert meta["kind"] == "meta" and last["type"] == "exit" and last["status"] == "ok"
    sys_recs = [r for r in records if r["kind"] == SYS]
    assert 3 <= len(sys_recs) <= 1.5 / 0.25 + 2  # ~every 0.25 s over 1.5 s of training
    for rec in sys_recs:
        assert meta["t"] < rec["t"] < last["t"]
        assert rec["rss"] > 50 << 20  # torch is loaded
        assert rec["cpu_percent"] >= 0.0 and rec["mem_available"] > 0
        assert ("gpus" in rec) == REAL_GPU
    if not REAL_GPU:
        (note,) = meta["notes"]
        assert note.startswith("no NVIDIA GPU: NVML unavailable (")
        assert meta["devices"] == [{"type": "cpu", "cpus": os.cpu_count()}]
    assert not [r for r in records if r["kind"] == EVENT and r["type"] == EV_WARNING]


_CHILDREN_SCRIPT = """
import json, subprocess, sys, time
from dltop.probe.system import SystemSampler

recs = []
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
sampler = SystemSampler(recs.append, interval=0.05)
sampler.start()
deadline = time.monotonic() + 30
while not any("children_rss" in r for r in recs) and time.monotonic() < deadline:
    time.sleep(0.02)
child.kill()
child.wait()  # reaped: gone, not a zombie
n = len(recs)
while len(recs) < n + 6 and time.monotonic() < deadline:  # samples in flight settle
    time.sleep(0.02)
sampler.stop()
print(json.dumps(recs))
"""


def test_children_rss_counts_live_child_processes() -> None:
    # in a fresh process whose only child is the sleeper: pytest's own children (other
    # tests' servers, tmux) would otherwise count too
    out = subprocess.run(
        [sys.executable, "-c", _CHILDREN_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    records = [r for r in json.loads(out.stdout) if r.get("kind") == SYS]
    with_child = [r["children_rss"] for r in records if "children_rss" in r]
    assert with_child and min(with_child) > 1 << 20  # a Python interpreter
    assert all("children_rss" not in r for r in records[-2:])  # absent, not 0
