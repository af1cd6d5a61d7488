"""How far a long ``dltop check`` has got, on one line of a terminal's stderr.

Why: a job of 64 ranks of 100 k steps takes a minute, a 1 M-step log ~7 s, and a check
that prints nothing meanwhile looks hung. Only on a terminal (CI logs and pipes get
nothing: stdout and the exit code are the contract there), only once the check has run
``AFTER_S`` (a quick check never flickers), at most ``EVERY_S`` apart, and erased at the
end so the report starts on a clean line. It shows sizes and counts only, never a name
from the files.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .core.files.sourcefiles import total_size
from .core.text.fmt import nbytes
from .core.text.safetext import visible

AFTER_S = 1.0  # seconds of checking before the line first shows
EVERY_S = 0.2  # seconds between two updates of the line


class Progress:
    """Bytes read of the logs being checked; :meth:`done` erases the line."""

    def __init__(self, paths: list[str], out: TextIO, label: str = "dltop check") -> None:
        self.label = label
        self.total = total_size(paths)
        self.files = len(paths)
        self.read = 0  # bytes of the files finished
        self.finished = 0
        self._current = 0  # bytes read of the file being read here
        self._out = out
        self._start = time.monotonic()
        self._last = 0.0
        self._shown = False

    @classmethod
    def for_stderr(cls, paths: list[str], label: str = "dltop check") -> Progress | None:
        """A progress line when stderr is a terminal, else ``None``."""
        try:
            if not sys.stderr.isatty():
                return None
        except (AttributeError, ValueError):
            return None
        return cls(paths, sys.stderr, label)

    def reading(self, done: int) -> None:
        """``done`` bytes of the file being read here."""
        self._current = done
        self._show()

    def file_done(self, path: str) -> None:
        """A file is checked (here or in a worker process)."""
        self.read += total_size([path])
        self.finished += 1
        self._current = 0
        self._show()

    def _show(self) -> None:
        now = time.monotonic()
        if now - self._start < AFTER_S or now - self._last < EVERY_S:
            return
        self._last = now
        got = min(self.total, self.read + self._current)
        share = 100 * got // self.total if self.total else 100
        line = f"{self.label}: {share} % of {nbytes(self.total)}"
        if self.files > 1:
            line += f" ({self.finished} of {self.files} files checked)"
        self._write(f"\r{visible(line)}\x1b[K")
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self._out.write(text)
            self._out.flush()
        except (OSError, ValueError):
            pass  # a closed terminal: the check goes on
