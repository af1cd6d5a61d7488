"""Checking and listing log files before a reader thread touches them.

Errors a user can cause (a typo in the path, a file they cannot read, a file that is not
a dltop log) must end as one line the CLI prints without a traceback, so they are raised
here, synchronously, as :class:`SourceError`.

Only a regular file is ever read as a log (:func:`open_log`): a FIFO blocks its reader
until a writer comes, ``/dev/zero`` never ends, a socket cannot be opened, and opening a
device can act on it (a tape rewinds). Such a path is refused from its ``stat`` without
being opened, and what is opened is ``fstat``-ed again, so a file swapped in between cannot
block us either.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass

from ....probe.decoding import decode_line
from ....probe.schema import META
from .logbytes import HEAD_BYTES, first_record

_RANK_RE = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


class SourceError(Exception):
    """A source that cannot be opened; ``str()`` is one line with a hint."""


# O_NONBLOCK: opening a FIFO swapped in after our stat returns at once instead of waiting
# for a writer; on a regular file it changes nothing. O_NOCTTY: a terminal never becomes ours.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_PASS_LOG = "pass the .jsonl file the probe writes"
_NOT_A_FILE = (
    (stat.S_ISDIR, "a directory", "pass it as the source to list its rank files"),
    (stat.S_ISFIFO, "a FIFO (named pipe)", f"a pipe would block the reader; {_PASS_LOG}"),
    (stat.S_ISCHR, "a character device", f"a device is never read as a log; {_PASS_LOG}"),
    (stat.S_ISBLK, "a block device", f"a device is never read as a log; {_PASS_LOG}"),
    (stat.S_ISSOCK, "a socket file", f"a live run's socket is watched as unix:PATH; {_PASS_LOG}"),
)
_MISSING_HINT = "check the path or run `dltop ls` to list runs and logs"


def special_file(mode: int) -> tuple[str, str] | None:
    """(what it is, a hint) for anything but a regular file; None for one."""
    if stat.S_ISREG(mode):
        return None
    for test, what, why in _NOT_A_FILE:
        if test(mode):
            return what, why
    return "not a regular file", f"only a regular file is read as a log; {_PASS_LOG}"


def _refuse_special(path: str, mode: int) -> None:
    found = special_file(mode)
    if found is not None:
        what, hint = found
        raise SourceError(f"{path} is {what}, not a log file — {hint}")


def stat_log(path: str) -> os.stat_result:
    """``os.stat(path)``, its failure a one-line :class:`SourceError` that names the cause:
    a symlink loop is not "no such file"."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise SourceError(
                f"no such file: {path} is a symlink to a missing file — {_MISSING_HINT}"
            ) from None
        raise SourceError(f"no such file: {path} — {_MISSING_HINT}") from None
    except PermissionError:
        raise SourceError(f"permission denied: {path} — the viewer needs read access") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SourceError(
                f"symlink loop: {path} — a symbolic link on this path leads back to itself; "
                "fix or remove the link (`ls -l` shows where each points)"
            ) from None
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None


def is_regular(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``stat(path)`` when it is a regular file (a symlink to one counts), else ``None``:
    what a listing asks before it may open a file (a FIFO blocks its reader, a device may
    never end); gone or unreadable is ``None`` too. Whoever then opens it uses
    :func:`open_log`, which checks again what it opened."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def total_size(paths: list[str]) -> int:
    """The bytes of these files now; one that cannot be stat'ed counts 0 (whoever opens
    it names the error)."""
    total = 0
    for p in paths:
        try:
            total += os.stat(p).st_size
        except (OSError, ValueError):
            pass
    return total


def is_missing(path: str) -> bool:
    """True when nothing is at ``path`` (or a symlink there points nowhere); False for a
    path that exists or fails for another reason (a loop, no permission): those are named
    by :func:`stat_log`, not called missing."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def open_log(path: str) -> int:
    """A read-only descriptor on the regular file at ``path``, else :class:`SourceError`.

    Never blocks and never opens a FIFO, device or socket (see the module docstring). The
    descriptor stays non-blocking: nothing changes for a regular file, and a procfs-like
    file that would block answers EAGAIN instead. The caller closes it.
    """
    _refuse_special(path, stat_log(path).st_mode)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except PermissionError:
        raise SourceError(f"permission denied: {path} — the viewer needs read access") from None
    except OSError:
        stat_log(path)  # gone or looped meanwhile: say which
        raise
    try:
        _refuse_special(path, os.fstat(fd).st_mode)  # swapped in after the stat
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_head(path: str, size: int = HEAD_BYTES) -> bytes | None:
    """The first ``size`` bytes of the regular file at ``path``, opened as :func:`open_log`
    opens it; ``None`` when it cannot be opened or read (the usual path says why)."""
    try:
        fd = open_log(path)
    except (OSError, SourceError):
        return None
    try:
        return os.pread(fd, size, 0)
    except OSError:
        return None
    finally:
        os.close(fd)


def check_log_file(path: str) -> None:
    """Raise :class:`SourceError` unless ``path`` is a readable file that could be a log.

    An empty file, or one whose first line is not complete yet, is fine (the run is just
    starting). A file is "not a log" when none of its first complete lines is a JSON record
    with a ``kind``, or when it has no complete line and holds binary data.
    """
    try:
        fd = open_log(path)
        try:
            head = os.pread(fd, HEAD_BYTES, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = [ln for ln in head.split(b"\n")[:-1] if ln.strip()][:20]  # complete lines only
    if lines and all(decode_line(ln) is None for ln in lines):
        raise SourceError(
            f'not a dltop log: {path} (no JSON record with a "kind" in its first lines)'
        )
    if not lines and b"\0" in head:  # NULs after good lines are crash debris, not binary
        raise SourceError(f"not a dltop log: {path} (binary data) — pass the run's .jsonl file")


Family = tuple[str | None, str | None]  # (file name, run id) with the rank number as "#"


@dataclass(frozen=True)
class RankFile:
    """One log in a run directory; ``rank`` from its meta record, else from its name;
    ``job``: True when the log says it is one rank of a multi-process job (its meta's world
    size is over 1, or its name is a rank's, ``rank<R>.jsonl``), False when its meta says it
    is a run of one process, None when it cannot tell (no meta yet: a rank that has just
    opened its file). ``world`` (its meta's world size) and ``family`` (its name and run
    id with the rank number taken out, each when it holds one: ``rank#.jsonl``,
    ``exp.rank#``) say which job it belongs to (``jobs.py``: a folder holding
    several jobs' ranks)."""

    path: str
    rank: int | None
    size: int
    mtime: float
    job: bool | None = None
    world: int | None = None
    family: Family = (None, None)


_MAX_FAMILY = 200  # characters of a name or run id kept as a job's family


def _pattern(text: object) -> str | None:
    """``text`` with its rank number replaced by ``#`` (``rank3.jsonl`` -> ``rank#.jsonl``);
    ``None`` when it holds none."""
    if not isinstance(text, str) or not _RANK_RE.search(text):
        return None
    return _RANK_RE.sub(lambda m: m.group(0)[: -len(m.group(1))] + "#", text)[:_MAX_FAMILY]


def _rank_of(path: str) -> tuple[int | None, bool | None, int | None, Family]:
    """The log's rank (its meta's, else its name's), whether it is one of a job's ranks
    (``RankFile.job``), its world size and its job's family (``RankFile``)."""
    try:
        fd = open_log(path)
        try:
            rec = first_record(fd)
        finally:
            os.close(fd)
    except (OSError, SourceError):
        return None, None, None, (None, None)
    name = os.path.basename(path)
    meta = rec if rec is not None and rec.get("kind") == META else None
    world = meta.get("world_size") if meta is not None else None
    world = world if type(world) is int and world > 0 else None
    family = (_pattern(name), _pattern(meta.get("run_id")) if meta is not None else None)
    m = _RANK_RE.search(name)
    said = meta.get("rank") if meta is not None else None
    rank = said if type(said) is int else None
    if m is not None:
        return (rank if rank is not None else int(m.group(1))), True, world, family
    if meta is None:
        return None, None, None, family  # no meta (yet): cannot tell
    return rank, (world > 1) if world is not None else None, world, family


def separate_runs(files: list[RankFile]) -> bool:
    """Several logs each of which says it is a run of one process: a folder of separate
    runs (``./dltop-runs`` holds every run of a project), not one job to judge rank by rank
    (their alerts would be read as one run's). A log that cannot tell (no meta yet) keeps
    the folder a job, as it always was."""
    return len(files) > 1 and all(f.job is False for f in files)


def separate_note(directory: str, files: list[RankFile], chosen: RankFile) -> str:
    """What is said when a folder of separate runs is opened at its newest."""
    others = len(files) - 1
    return (
        f"{others} other log{'s' if others != 1 else ''} in {directory}: separate runs, not "
        f"the ranks of one job; this is the newest, {os.path.basename(chosen.path)} (hint: "
        "pass a log file to open another)"
    )


def list_rank_files(directory: str, skipped: list[str] | None = None) -> list[RankFile]:
    """The ``*.jsonl`` files directly in ``directory``: by rank, then newest first.

    A ``*.jsonl`` that is not a regular file (a FIFO, a device, a symlink loop) is left
    out, with a one-line note appended to ``skipped`` when it is given."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise SourceError(f"no such directory: {directory}") from None
    except PermissionError:
        raise SourceError(f"permission denied: {directory}") from None
    except OSError as exc:  # not a directory (any more), a symlink loop, an I/O error
        raise SourceError(f"cannot list {directory}: {exc.strerror or exc}") from None
    out = []
    for name in names:
        if not name.endswith(".jsonl"):
            continue
        path = os.path.join(directory, name)
        try:
            st = stat_log(path)
            _refuse_special(path, st.st_mode)
        except SourceError as exc:
            if skipped is not None:
                skipped.append(f"skipped {exc}")
            continue
        rank, job, world, family = _rank_of(path)
        out.append(RankFile(path, rank, st.st_size, st.st_mtime, job, world, family))
    out.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, -r.mtime))
    return out


def pick_rank_file(files: list[RankFile]) -> RankFile:
    """Rank 0 when a file says so, else the most recently written file (also for a
    folder of separate runs, which all say rank 0)."""
    if separate_runs(files):
        return max(files, key=lambda f: f.mtime)
    for f in files:
        if f.rank == 0:
            return f
    return max(files, key=lambda f: f.mtime)
