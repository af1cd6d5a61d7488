"""The guard that fails a test leaving a thread running (``tests/threadkit.py``)."""

from __future__ import annotations

import io
import threading
import time

import pytest
from threadkit import threads_left


def test_a_thread_still_running_is_named_and_one_that_ends_in_time_is_not() -> None:
    before = set(threading.enumerate())
    stop = threading.Event()
    stuck = threading.Thread(target=stop.wait, name="stuck-accept-loop", daemon=True)
    ending = threading.Thread(target=time.sleep, args=(0.2,), name="ends-soon", daemon=True)
    stuck.start()
    ending.start()
    try:
        assert threads_left(before, within=1.0) == ["stuck-accept-loop"]
        assert not ending.is_alive()  # waited for, not named
    finally:
        stop.set()
        stuck.join(5)
    assert threads_left(before, within=1.0) == []


def test_tqdm_s_monitor_is_told_to_end() -> None:
    """A Trainer's progress bars start it and it runs until told (it would be named
    after every test that made a progress bar)."""
    tqdm_module = pytest.importorskip("tqdm")
    from tqdm import _monitor

    tqdm = tqdm_module.tqdm
    before = set(threading.enumerate())
    old = tqdm.monitor_interval
    tqdm.monitor_interval = 10
    try:
        for _ in tqdm(range(3), file=io.StringIO()):
            pass
        assert any(isinstance(t, _monitor.TMonitor) for t in threading.enumerate())
        assert threads_left(before, within=5.0) == []
    finally:
        tqdm.monitor_interval = old
