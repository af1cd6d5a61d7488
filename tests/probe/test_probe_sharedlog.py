"""The live stream's one shared copy (probe/sharedlog.py): its byte accounting stays true
under any mix of appends and trims, and it never reads a chunk it has freed.

A training with no viewer, stepping at full speed, trims the log to the backlog after
every batch; the window (which reaches further back than the backlog) then started
before the oldest chunk kept, and the next append read a freed chunk: IndexError, and
the live socket server stopped ("cannot write to LiveSink ... the live socket server
stopped"), found while measuring the probe's cost.
"""

from __future__ import annotations

import random

from dltop.probe.sharedlog import SharedLog


def _check(log: SharedLog) -> None:
    sizes = {s: len(log.get(s)) for s in range(log.first, log.end)}
    assert log.first <= log.backlog_start <= log.end and log.first <= log.window_start
    assert log.bytes == sum(sizes.values())
    assert log._window_bytes == sum(sizes[s] for s in range(log.window_start, log.end))
    assert log._backlog_bytes == sum(sizes[s] for s in range(log.backlog_start, log.end))


def test_no_viewer_full_speed_keeps_the_backlog_and_never_fails() -> None:
    log = SharedLog(backlog_max=100, window_max=1000)
    for _ in range(200):
        log.append(b"x" * 59 + b"\n")
        log.trim(log.end)  # no viewer: only the backlog is kept
        _check(log)
    assert log.bytes <= 100 + 60


def test_random_appends_viewers_and_trims_keep_the_accounting_true() -> None:
    rng = random.Random(7)
    for _ in range(50):
        log = SharedLog(backlog_max=rng.randint(50, 500), window_max=rng.randint(50, 2000))
        viewers: list[int] = []
        for _ in range(300):
            op = rng.random()
            if op < 0.6:
                log.append(b"y" * rng.randint(0, 200) + b"\n")
            elif op < 0.7:
                viewers.append(log.backlog_start)  # a new viewer starts on the backlog
            elif op < 0.9 and viewers:
                i = rng.randrange(len(viewers))  # a viewer reads some batches
                viewers[i] = min(log.end, viewers[i] + rng.randint(1, 5))
            elif viewers:
                viewers.pop(rng.randrange(len(viewers)))
            # a viewer further behind than the window skips ahead, as the server does
            viewers = [max(v, log.window_start) for v in viewers]
            log.trim(min([log.end, *viewers]))
            _check(log)
            for v in viewers:
                assert v >= log.first  # every viewer's next batch is still there
