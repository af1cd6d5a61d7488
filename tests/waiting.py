"""Polling for a condition in tests: a bound on a hang, never a timing assertion."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` passes; the last answer is returned, so
    ``assert wait_for(...)`` fails with the condition still false."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()
