"""The charts' thread (``tui/app/chart_thread.py``): jobs run one at a time in the order asked,
a job asked for again before its turn runs once (the latest), and nothing runs after close."""

from __future__ import annotations

import threading
import time

from dltop.tui.app.chart_thread import ChartThread


def _wait(cond: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def test_jobs_run_in_order_coalesced_by_key_on_one_thread() -> None:
    loop = ChartThread()
    gate = threading.Event()
    ran: list[tuple[str, str]] = []

    def job(tag: str, wait: bool = False) -> object:
        def run() -> None:
            if wait:
                gate.wait(10)
            ran.append((tag, threading.current_thread().name))

        return run

    assert loop.submit("first", job("first", wait=True))
    assert _wait(lambda: loop.busy)  # the first holds the thread while the others queue
    loop.submit("a", job("a-old"))
    loop.submit("b", job("b"))
    loop.submit("a", job("a-new"))  # replaces a-old, keeps a's place before b
    assert loop.pending() == 3
    gate.set()
    assert _wait(lambda: len(ran) == 3 and loop.pending() == 0)
    assert [t for t, _ in ran] == ["first", "a-new", "b"]
    assert {name for _, name in ran} == {"dltop-charts"}
    loop.close()


def test_close_drops_the_waiting_jobs_and_refuses_new_ones() -> None:
    loop = ChartThread()
    gate = threading.Event()
    ran: list[str] = []
    loop.submit(1, lambda: (gate.wait(10), ran.append("running")))
    assert _wait(lambda: loop.busy)
    loop.submit(2, lambda: ran.append("waiting"))
    loop.close()
    gate.set()
    assert not loop.submit(3, lambda: ran.append("late"))
    thread = loop._thread
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive() and ran == ["running"]
