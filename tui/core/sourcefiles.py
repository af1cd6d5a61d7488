"""Checking and listing log files before a reader thread touches them.

Errors a user can cause (a typo in the path, a file they cannot read, a file that is not
a dltop log) must end as one line the CLI prints without a traceback, so they are raised
here, synchronously, as :class:`SourceError`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dltop.probe.schema import META, decode_line

_PROBE = 1 << 16  # bytes read to recognise a log
_RANK_RE = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


class SourceError(Exception):
    """A source that cannot be opened; ``str()`` is one line with a hint."""


def check_log_file(path: str) -> None:
    """Raise :class:`SourceError` unless ``path`` is a readable file that could be a log.

    An empty file, or one whose first line is not complete yet, is fine (the run is just
    starting). A file is "not a log" when none of its first complete lines is a JSON record
    with a ``kind``, or when it has no complete line and holds binary data.
    """
    if not os.path.exists(path):
        hint = "check the path or run `dltop ls` to list runs and logs"
        raise SourceError(f"no such file: {path} — {hint}")
    if os.path.isdir(path):
        raise SourceError(f"{path} is a directory — pass it as the source to list its rank files")
    try:
        with open(path, "rb") as f:
            head = f.read(_PROBE)
    except PermissionError:
        raise SourceError(f"permission denied: {path} — the viewer needs read access") from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = [ln for ln in head.split(b"\n")[:-1] if ln.strip()][:20]  # complete lines only
    if lines and all(decode_line(ln) is None for ln in lines):
        raise SourceError(
            f'not a dltop log: {path} (no JSON record with a "kind" in its first lines)'
        )
    if not lines and b"\0" in head:  # NULs after good lines are crash debris, not binary
        raise SourceError(f"not a dltop log: {path} (binary data) — pass the run's .jsonl file")


@dataclass(frozen=True)
class RankFile:
    """One log in a run directory; ``rank`` from its meta record, else from its name."""

    path: str
    rank: int | None
    size: int
    mtime: float


def _rank_of(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            head = f.read(_PROBE)
    except OSError:
        return None
    nl = head.find(b"\n")
    rec = decode_line(head[:nl]) if nl >= 0 else None
    if rec is not None and rec.get("kind") == META and type(rec.get("rank")) is int:
        return rec["rank"]
    m = _RANK_RE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def list_rank_files(directory: str) -> list[RankFile]:
    """The ``*.jsonl`` files directly in ``directory``: by rank, then newest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise SourceError(f"no such directory: {directory}") from None
    except PermissionError:
        raise SourceError(f"permission denied: {directory}") from None
    out = []
    for name in names:
        if not name.endswith(".jsonl"):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not os.path.isfile(path):
            continue
        out.append(RankFile(path, _rank_of(path), st.st_size, st.st_mtime))
    out.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, -r.mtime))
    return out


def pick_rank_file(files: list[RankFile]) -> RankFile:
    """Rank 0 when a file says so, else the most recently written file."""
    for f in files:
        if f.rank == 0:
            return f
    return max(files, key=lambda f: f.mtime)
