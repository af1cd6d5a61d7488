"""What the readers of other tools' logs share: limits, the record builders, value checks.

Everything in these files is untrusted (another person's file): every number goes through
:func:`dltop.probe.schema.as_float` / :func:`~dltop.probe.schema.as_step`, every limit
here bounds the work a file can cause, and a file that cannot be read is one
:class:`~dltop.tui.core.sourcefiles.SourceError` line, never a traceback.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from dltop.probe.schema import EV_EXIT, EVAL, EVENT, META, SCHEMA_VERSION, STEP, as_float, as_step
from dltop.tui.core.sourcefiles import SourceError, open_log

MAX_FILE_BYTES = 64 << 20  # bytes read from one file; a bigger file is refused, not cut
MAX_ENTRIES = 2_000_000  # log_history entries, CSV rows or TensorBoard events per source
MAX_EVENT_FILES = 64  # TensorBoard event files read from one folder
MAX_SCAN_ENTRIES = 5000  # directory entries looked at while searching a folder for event files
MAX_SCAN_DEPTH = 4  # folder levels searched below the one given
MAX_EXTRAS = 16  # extra metrics kept per record kind (eval accuracy, epoch...)

# the `format` names, and what `meta.source` says about each
HF, LIGHTNING, TENSORBOARD = "hf", "lightning", "tensorboard"
SOURCE_NOTE = {
    HF: "Hugging Face Trainer trainer_state.json (read-only; converted by dltop)",
    LIGHTNING: "PyTorch Lightning CSVLogger metrics.csv (read-only; converted by dltop)",
    TENSORBOARD: "TensorBoard event files, scalars only (read-only; converted by dltop)",
}
# the tool each format comes from, as a sentence names it ("not in this Lightning log")
TOOL_NAME = {HF: "Hugging Face Trainer", LIGHTNING: "Lightning", TENSORBOARD: "TensorBoard"}


@dataclass
class ForeignLog:
    """One source converted into our records: ``meta`` first, then ``step``/``eval``/``event``."""

    format: str  # HF, LIGHTNING or TENSORBOARD
    path: str  # the file or folder given
    files: list[str]  # the files read
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # entries (rows, events, values) left out as unusable
    notes: list[str] = field(default_factory=list)  # said once in meta.notes

    @property
    def steps(self) -> int:
        return sum(1 for r in self.records if r.get("kind") == STEP)


def read_capped(path: str, what: str) -> bytes:
    """The whole regular file at ``path`` (never a FIFO or device: ``open_log``), refused
    with a one-line error when it is bigger than :data:`MAX_FILE_BYTES`."""
    fd = open_log(path)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_FILE_BYTES:
            raise SourceError(
                f"{path}: {what} of {size} bytes is over dltop's {MAX_FILE_BYTES >> 20} MiB "
                "limit for another tool's log — pass a smaller file"
            )
        parts: list[bytes] = []
        got = 0
        while got <= MAX_FILE_BYTES:
            data = os.read(fd, min(1 << 20, MAX_FILE_BYTES + 1 - got))
            if not data:
                break
            parts.append(data)
            got += len(data)
        if got > MAX_FILE_BYTES:  # it grew while we read
            raise SourceError(f"{path}: grew past the {MAX_FILE_BYTES >> 20} MiB limit while read")
        return b"".join(parts)
    except BlockingIOError:
        raise SourceError(f"cannot read {path}: it would block") from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def number(value: Any) -> float | None:
    """A metric value: a float (NaN and infinities kept: they are the news), or None for
    what is no number (text, bool, list, object). Numeric text (a CSV cell) is parsed."""
    f = as_float(value)
    if f is not None:
        return f
    if isinstance(value, str):
        s = value.strip()
        if not s or len(s) > 64:
            return None
        try:
            return float(s)
        except ValueError:
            return None
    return None


def step_of(value: Any) -> int | None:
    """A step number, or None when it is not a whole number in range (CSV cells included)."""
    if isinstance(value, str):
        f = number(value)
        if f is None or not math.isfinite(f):
            return None
        value = f
    return as_step(value)


def wall_time(value: Any) -> float | None:
    f = as_float(value)
    return f if f is not None and math.isfinite(f) and 0 < f < 1e11 else None


def run_id(path: str) -> str:
    """The file or folder name; a generic name (trainer_state.json, metrics.csv) keeps its
    folder's name in front (``checkpoint-500/trainer_state.json``)."""
    path = os.path.normpath(path)
    name = os.path.basename(path)
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if name in ("trainer_state.json", "metrics.csv") and parent:
        return f"{parent}/{name}"
    return name


def meta_record(fmt: str, path: str, notes: list[str], **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "kind": META,
        "v": SCHEMA_VERSION,
        "run_id": run_id(path),
        "source": SOURCE_NOTE[fmt],
        "format": fmt,
        "notes": list(notes),
    }
    rec.update({k: v for k, v in extra.items() if v is not None})
    return rec


def exit_record(step: int | None) -> dict[str, Any]:
    """The tool's own end-of-training summary was logged: the run finished."""
    rec: dict[str, Any] = {"kind": EVENT, "type": EV_EXIT, "status": "ok"}
    if step is not None:
        rec["step"] = step
    return rec


class Merger:
    """``step`` and ``eval`` records keyed by (kind, step), in order of first appearance,
    so values of one step logged in separate rows or events become one record."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], dict[str, Any]] = {}
        self.order: list[dict[str, Any]] = []
        self.repeated = 0  # other values of a field a step already had: left out, said

    def put(self, kind: str, step: int, name: str, value: float) -> None:
        key = (kind, step)
        rec = self._by_key.get(key)
        if rec is None:
            rec = {"kind": kind, "step": step}
            self._by_key[key] = rec
            self.order.append(rec)
        if name not in rec:
            rec[name] = value
        elif name != "t" and rec[name] != value:  # a time, or the same value again: no loss
            self.repeated += 1

    def records(self) -> list[dict[str, Any]]:
        return self.order

    def note(self) -> str | None:
        """What was left out of steps logged more than once (a resumed run, a loop that
        logs twice per step), or None."""
        if not self.repeated:
            return None
        return (
            f"warning: {self.repeated} values left out: their step already had another value "
            "of that field (the first of each is kept)"
        )


def skipped_note(skipped: int, what: str) -> str:
    return f"warning: {skipped} {what} skipped (not a number, no step, or unknown shape)"


__all__ = [
    "EVAL",
    "STEP",
    "ForeignLog",
    "Merger",
    "SourceError",
    "exit_record",
    "meta_record",
    "number",
    "read_capped",
    "run_id",
    "skipped_note",
    "step_of",
    "wall_time",
]
