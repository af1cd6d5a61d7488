"""The one copy of the stream that every viewer reads: batches kept once, viewers as positions.

Why: each viewer used to get its own copy of the backlog (the last 4 MB of lines joined
into one new bytes object at connect), so 100 viewers that never read held 400 MB of the
training's memory. Here the backlog and the live stream are one sequence of immutable
batches (the writer's ``bytes``, never copied); a viewer is only a position in it (the
next batch's sequence number). A batch is kept while it is in the backlog (the last
``backlog_max`` bytes, what a new viewer starts from) or while a viewer still needs it
and is at most ``window_max`` bytes behind the live end; a viewer further behind skips
ahead to the window's start and is told how many records it missed (``viewer_cursor``).
So the memory is bounded by ``max(backlog_max, window_max)`` whatever the number of
viewers, and nothing is ever copied per viewer.

Everything here runs on the server thread.
"""

from __future__ import annotations

from collections import deque


class SharedLog:
    """Batches of complete lines, numbered from 0, with the cumulative line count at each."""

    def __init__(self, backlog_max: int, window_max: int) -> None:
        self.backlog_max = backlog_max
        # a viewer may always be as far behind as the backlog it was started on: a late
        # viewer is not told it missed records while it is still reading its history
        self.window_max = max(window_max, backlog_max)
        self._chunks: deque[bytes] = deque()
        self._lines: deque[int] = deque()  # lines appended before each retained chunk
        self.first = 0  # sequence number of the oldest retained chunk
        self.end = 0  # one past the newest
        self.lines_end = 0  # lines appended in all
        self.bytes = 0  # bytes retained
        self.backlog_start = 0  # where a new viewer starts: the last backlog_max bytes
        self._backlog_bytes = 0
        self.window_start = 0  # the oldest chunk a viewer may still be on
        self._window_bytes = 0

    def append(self, chunk: bytes) -> None:
        """Add a batch at the live end (always kept: it is the backlog's newest)."""
        self._chunks.append(chunk)
        self._lines.append(self.lines_end)
        self.lines_end += chunk.count(b"\n")
        self.end += 1
        size = len(chunk)
        self.bytes += size
        self._backlog_bytes += size
        self._window_bytes += size
        # each bound keeps at least the newest chunk, however big (a burst the writer caught
        # up on reaches a viewer that keeps up whole)
        while self._backlog_bytes > self.backlog_max and self.backlog_start < self.end - 1:
            self._backlog_bytes -= len(self.get(self.backlog_start))
            self.backlog_start += 1
        while self._window_bytes > self.window_max and self.window_start < self.end - 1:
            self._window_bytes -= len(self.get(self.window_start))
            self.window_start += 1

    def get(self, seq: int) -> bytes:
        return self._chunks[seq - self.first]

    def lines_at(self, seq: int) -> int:
        """Lines appended before chunk ``seq`` (a retained one, or ``end``)."""
        return self.lines_end if seq >= self.end else self._lines[seq - self.first]

    def trim(self, keep_from: int) -> None:
        """Free the chunks before ``keep_from`` (the oldest position a viewer is still on,
        ``end`` for none) that the backlog does not hold either."""
        keep_from = min(keep_from, self.backlog_start)
        while self.first < keep_from:
            size = len(self._chunks.popleft())
            self.bytes -= size
            self._lines.popleft()
            if self.first >= self.window_start:
                self._window_bytes -= size  # a freed chunk leaves the window too
            self.first += 1
        # nobody is before ``first`` any more: the window starts there at the earliest, so
        # the window's accounting never reads a chunk already freed (an IndexError that
        # stopped the live server of a training with no viewer, stepping at full speed)
        self.window_start = max(self.window_start, self.first)
