"""Checklist ticks a person made, kept in a sidecar file next to the log.

The viewer never writes to the user's log; ticks live in ``<log>.dltop-ticks.json`` so
that they survive a restart of the viewer and travel with the log. A sidecar that
cannot be written (read-only directory) only costs persistence: ticks stay in memory
and ``error`` says why, for the UI to show once.

The sidecar sits next to a log that may be someone else's, so it is untrusted input
like the log: it is read only when it is a regular file owned by you or by the log's
owner (a symlink is followed only when you own the link), at most ``MAX_BYTES`` of it,
through a non-blocking descriptor, and parsed only when its brackets nest at most
``MAX_DEPTH`` deep (checked before ``json.loads``, which would recurse). Anything else
is ignored with one warning in ``error``; entries of the wrong shape are dropped and
counted. Saving writes a temporary file in the same directory and renames it over the
sidecar, so a planted symlink is replaced, never written through.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..files.sourcefiles import special_file
from ..text.fmt import nbytes

SUFFIX = ".dltop-ticks.json"
MAX_BYTES = 1 << 20  # ours is a few KB: {"v": 1, "ticks": {alert key: [step ids]}}
MAX_DEPTH = 8  # ours nests 3 deep
MAX_ID = 256  # characters of one alert key or step id
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class SidecarError(Exception):
    """Why a sidecar is ignored: the end of a one-line warning."""


def sidecar_path(log_path: str | os.PathLike[str]) -> Path:
    return Path(str(log_path) + SUFFIX)


def nested_too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """True when the brackets in ``data`` nest deeper than ``limit`` (or do not balance).

    Linear and without recursion: the brackets alone are kept and the innermost pairs
    removed, ``limit`` times at most. Brackets inside strings count too, which only errs
    on the safe side (dltop's own keys and step ids hold none)."""
    brackets = data.translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if shorter == brackets:
            return True  # unbalanced
        brackets = shorter
    return bool(brackets)


def _owners(log_path: str | os.PathLike[str]) -> set[int]:
    owners = {os.geteuid()}
    try:
        owners.add(os.stat(log_path).st_uid)
    except OSError:
        pass
    return owners


def read_sidecar(path: Path, owners: set[int]) -> bytes | None:
    """The sidecar's bytes; None when there is none; :class:`SidecarError` when it is not
    one we may read (see the module docstring)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SidecarError(exc.strerror or str(exc)) from None
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid != os.geteuid():
            raise SidecarError("a symlink owned by another user")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise SidecarError(f"a symlink that leads nowhere ({exc.strerror or exc})") from None
        nofollow = 0
    kind = special_file(st.st_mode)
    if kind is not None:
        raise SidecarError(f"{kind[0]}, not a regular file")
    if st.st_uid not in owners:
        raise SidecarError("owned by another user than you or the log's owner")
    if st.st_size > MAX_BYTES:
        raise SidecarError(f"{nbytes(st.st_size)}, over the {nbytes(MAX_BYTES)} a sidecar may have")
    try:
        fd = os.open(path, _OPEN_FLAGS | nofollow)
    except OSError as exc:
        raise SidecarError(exc.strerror or str(exc)) from None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise SidecarError("replaced while it was opened")
        parts: list[bytes] = []
        got = 0
        while got <= MAX_BYTES:
            part = os.read(fd, MAX_BYTES + 1 - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
    except OSError as exc:
        raise SidecarError(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if got > MAX_BYTES:
        raise SidecarError(f"over the {nbytes(MAX_BYTES)} a sidecar may have")
    return b"".join(parts)


def parse_ticks(data: bytes) -> tuple[dict[str, set[str]], int]:
    """``({alert key: {step id}}, entries dropped for their shape)``; SidecarError when the
    whole file is unusable."""
    if nested_too_deep(data):
        raise SidecarError(f"nested deeper than {MAX_DEPTH} levels")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # RecursionError: cannot happen past the check
        raise SidecarError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise SidecarError(f"a JSON {type(raw).__name__}, not an object")
    ticks: Any = raw.get("ticks")
    if ticks is None:
        ticks = {}
    if not isinstance(ticks, dict):
        raise SidecarError(f'"ticks" is a JSON {type(ticks).__name__}, not an object')
    out: dict[str, set[str]] = {}
    dropped = 0
    for key, steps in ticks.items():
        if len(key) > MAX_ID or not isinstance(steps, list):
            dropped += 1
            continue
        good = {s for s in steps if isinstance(s, str) and len(s) <= MAX_ID}
        dropped += len(steps) - len(good)
        if good:
            out[key] = good
    return out, dropped


class Ticks:
    """``{alert key: {step id, ...}}``, loaded at start, saved atomically on each change."""

    @classmethod
    def beside(cls, source: str | None) -> Ticks:
        """The ticks kept beside a log file; a socket address, a folder or a missing path
        keeps none (nowhere to put a sidecar that travels with the log)."""
        return cls(source if source and os.path.isfile(source) else None)

    def __init__(self, log_path: str | os.PathLike[str] | None) -> None:
        self.path = sidecar_path(log_path) if log_path else None
        self.error: str | None = None
        self._ticks: dict[str, set[str]] = {}
        if self.path is None or log_path is None:
            return
        try:
            data = read_sidecar(self.path, _owners(log_path))
            if data is None:
                return
            self._ticks, dropped = parse_ticks(data)
        except SidecarError as e:
            self.error = f"ticks file {self.path.name} ignored: {e}"
            return
        if dropped:
            self.error = f"ticks file {self.path.name}: {dropped} malformed entries ignored"

    def ticked(self, alert_key: str) -> set[str]:
        return set(self._ticks.get(alert_key, ()))

    def toggle(self, alert_key: str, step_id: str) -> bool:
        """Flip one tick, save, and return the new state."""
        steps = self._ticks.setdefault(alert_key, set())
        on = step_id not in steps
        if on:
            steps.add(step_id)
        else:
            steps.discard(step_id)
        self.save()
        return on

    def save(self) -> None:
        """A new file renamed over the sidecar: a symlink there is replaced, not followed."""
        if self.path is None:
            return
        data = {"v": 1, "ticks": {k: sorted(v) for k, v in sorted(self._ticks.items()) if v}}
        try:
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self.error = None
        except OSError as e:
            self.error = f"ticks not saved ({e.strerror or e}); kept in memory"
