"""The writer's side of its sinks: a batch to each, and a sink that fails is dropped, said once.

Apart from ``writer.py`` because it is the writer's failure policy, not its order of
work: a sink that raises (disk full, file size limit, the file descriptor closed under
us, a dead socket) is dropped and closed, one line goes to stderr, and a ``warning``
event goes to the sinks that still work. Nothing here ever raises. The writer's
``sinks`` and ``warnings`` are read where they are at each use (``close()`` replaces
the list), through ``SinkOwner``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Protocol

from .encoding import encode_record
from .schema import EV_WARNING, EVENT

if TYPE_CHECKING:
    from .filesink import Sink


class SinkOwner(Protocol):
    """What holds the sinks (``Writer`` is one): those still working, what was said."""

    sinks: list[Sink]
    warnings: list[str]


def say(message: str) -> None:
    """One line on stderr; a closed or broken stderr is no error."""
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def write_batch(w: SinkOwner, batch: bytes) -> None:
    """The batch to every sink; one that raises is dropped."""
    for sink in list(w.sinks):
        try:
            sink.write(batch)
        except Exception as e:
            sink_failed(w, sink, e)


def fsync_sinks(w: SinkOwner) -> None:
    """Every sink that can flush, to the disk; one that raises is dropped."""
    for sink in list(w.sinks):
        fl = getattr(sink, "flush", None)
        if fl is not None:
            try:
                fl(True)
            except Exception as e:
                sink_failed(w, sink, e)


def sink_failed(w: SinkOwner, sink: Sink, err: BaseException) -> None:
    if sink in w.sinks:
        w.sinks.remove(sink)
    with contextlib.suppress(Exception):
        sink.close()
    warn(w, f"cannot write to {sink!r} ({err}); dropped it, the training goes on")


def warn(w: SinkOwner, message: str) -> None:
    """One stderr line and one ``warning`` event to the sinks that still work."""
    w.warnings.append(message)
    say(f"dltop: warning: {message}")
    rec = {"kind": EVENT, "type": EV_WARNING, "t": time.time(), "message": message}
    try:
        line = encode_record(rec)
    except Exception:
        return
    for sink in list(w.sinks):
        try:
            sink.write(line)
        except Exception:
            if sink in w.sinks:
                w.sinks.remove(sink)
