"""Lines of a log back into records: the one reader every consumer goes through.

The tolerance rules of the format live here and hold everywhere at once: unknown kinds
and fields are kept, malformed, partial and over-long lines are skipped and counted,
never an exception; the non-finite markers are restored where a number can stand; the
text and id fields of ``meta`` and ``event`` records are checked for their type where
the record enters. Standard library only at import time; ``msgspec`` lazily.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from itertools import repeat
from typing import Any

from .repair import repair
from .schema import EVENT, MAX_LINE, META, NONFINITE_IN, Record, Records, as_float, as_step

# the markers as they stand in a line, each after one of its letters that numbers and
# lower-case keys never hold: a block without that letter (memchr, ~50x faster than the
# marker's own search) cannot hold the marker
_MARKER_GATES = ((b"N", b'"NaN"'), (b"I", b'Infinity"'))


def has_nonfinite_marker(data: bytes) -> bool:
    """Whether ``data`` may hold a non-finite marker to restore (exact: the marker itself)."""
    return any(gate in data and marker in data for gate, marker in _MARKER_GATES)


# Fields whose values are text, never numbers: a note that says "NaN", an argv entry
# "Infinity" or a traceback line stay strings. Their whole subtree is left alone.
_TEXT_KEYS = frozenset(
    (
        "kind",
        "type",
        "text",
        "message",
        "traceback",
        "cause",
        "exc_type",
        "signal",
        "status",
        "name",
        "names",
        "no_grad",
        "state",
        "source",
        "argv",
        "notes",
    )
)


def restore(value: Any) -> Any:
    """Inverse of :func:`sanitize`: turn the non-finite markers back into floats.

    Works in place on dicts and lists (the decoder's freshly decoded objects) and
    returns ``value``. Iterative, so that a line nested as deep as the JSON decoder
    allows cannot exhaust the interpreter's stack. Markers are restored only where a
    number can stand: ``meta`` records and text fields (see ``_TEXT_KEYS``: messages,
    tracebacks, argv, notes, names) keep their strings.
    """
    if isinstance(value, str):
        return NONFINITE_IN.get(value, value)
    if isinstance(value, dict) and value.get("kind") == META:
        return value
    get = NONFINITE_IN.get
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if isinstance(node, dict):
            for k, v in node.items():  # assigning existing keys while iterating is safe
                if isinstance(v, str):
                    if k not in _TEXT_KEYS and (f := get(v)) is not None:
                        node[k] = f
                elif isinstance(v, (dict, list)) and k not in _TEXT_KEYS:
                    push(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, str):
                    if (f := get(v)) is not None:
                        node[i] = f
                elif isinstance(v, (dict, list)):
                    push(v)
    return value


_decoder: Callable[[bytes], Any] | None = None


def _get_decoder() -> Callable[[bytes], Any]:
    global _decoder
    if _decoder is None:
        try:
            import msgspec

            _decoder = msgspec.json.Decoder().decode
        except ImportError:  # pragma: no cover

            def _stdlib(b: bytes) -> Any:
                return json.loads(b)

            _decoder = _stdlib
    return _decoder


# The shape readers may rely on in the two rare record kinds whose fields they use as
# text, lists and ids. Everything else a reader takes from a record goes through
# ``as_float``/``as_step``. A field of the wrong type is dropped where the record enters
# (``normalize``), so no consumer meets a list of notes that is a float, a pid of 400
# digits, a message that is a dict.
_META_SHAPE: dict[str, type | tuple[str, type]] = {
    "run_id": str, "host": str, "cwd": str, "python": str, "platform": str, "dltop": str,
    "torch": str, "cuda": str, "job": str, "socket": str,
    "v": int, "pid": int, "rank": int, "local_rank": int, "world_size": int, "restart": int,
    "t": float, "started": float,
    "argv": ("list", str), "notes": ("list", str), "devices": ("list", dict),
}  # fmt: skip
_EVENT_TEXT = ("type", "message", "exc_type", "signal", "status", "name", "state", "text")
_NORMALIZED = frozenset((META, EVENT))
_MAX_ID = 1 << 62  # pids, ranks, world sizes and versions are small; anything beyond is junk


def _fits(value: Any, want: type) -> bool:
    if want is float:
        f = as_float(value)
        return f is not None and math.isfinite(f)
    if want is int:
        return type(value) is int and -_MAX_ID < value < _MAX_ID
    return isinstance(value, want)


def normalize(record: Record) -> Record:
    """Drop the fields of a ``meta`` or ``event`` record whose type no reader can use
    (and list items of the wrong type); other kinds are returned as they are. In place."""
    kind = record.get("kind")
    if kind == META:
        for key, want in _META_SHAPE.items():
            if key not in record:
                continue
            value = record[key]
            if value is None:  # null is the log's "unknown" (torch/cuda without torch)
                continue
            if isinstance(want, tuple):
                if not isinstance(value, list):
                    del record[key]
                elif not all(isinstance(x, want[1]) for x in value):
                    record[key] = [x for x in value if isinstance(x, want[1])]
            elif not _fits(value, want):
                del record[key]
    elif kind == EVENT:
        for key in _EVENT_TEXT:
            if key in record and not isinstance(record[key], str):
                del record[key]
        tb = record.get("traceback")
        if tb is not None and not isinstance(tb, str):
            if isinstance(tb, list):
                record["traceback"] = [x for x in tb if isinstance(x, (str, dict))]  # frames
            else:
                del record["traceback"]
        for key in ("step", "t"):
            if key in record and (f := as_float(record[key])) is not None and math.isfinite(f):
                continue
            record.pop(key, None)
        if "step" in record and as_step(record["step"]) is None:
            del record["step"]
    return record


def decode_line(line: bytes | str) -> Record | None:
    """One line to a record, or ``None`` when it is not a JSON object with a ``kind``."""
    if isinstance(line, str):
        line = line.encode()
    line = line.strip()
    if not line or len(line) > MAX_LINE:
        return None
    try:
        obj = _get_decoder()(line)
    except Exception:
        quoted = repair(line)
        if quoted is None:
            return None
        try:
            obj = _get_decoder()(quoted)
        except Exception:
            return None
        line = quoted
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return None
    if has_nonfinite_marker(line):
        obj = restore(obj)
    if obj["kind"] in _NORMALIZED:
        normalize(obj)
    return obj


class LineDecoder:
    """Turns chunks of bytes into records, holding a partial last line until its newline.

    Counts what it skips so that a viewer can say "3 corrupt lines skipped" instead of
    failing or hiding it. ``feed`` never raises on bad input. A line longer than
    :data:`MAX_LINE` bytes is skipped and counted as malformed without being held in
    memory: a large file with no newlines costs bounded memory and linear time, and
    the decoder picks up again after the next newline.
    """

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # the partial last line, in pieces (joined once, linear)
        self._held = 0  # bytes in _parts
        self._skipping = 0  # bytes of an over-long line dropped so far (0: not skipping)
        self.records = 0  # records decoded
        self.malformed = 0  # non-empty lines that were not a record
        self.bytes = 0  # bytes fed, partial line included

    def feed(self, chunk: bytes) -> Records:
        """Records completed by ``chunk``; an unterminated tail waits for the next call."""
        self.bytes += len(chunk)
        if self._skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                self._skipping += len(chunk)
                return []
            self._skipping = 0  # the over-long line ends here; it was counted when it began
            chunk = chunk[nl + 1 :]
        end = chunk.rfind(b"\n")  # only the new bytes are searched: the held part has none
        if end < 0:
            self._hold(chunk)
            return []
        if self._parts:
            self._parts.append(chunk[: end + 1])
            block = b"".join(self._parts)
            self._parts, self._held = [], 0
        else:
            block = chunk[: end + 1]
        self._hold(chunk[end + 1 :])
        return self._decode_block(block)

    def _hold(self, piece: bytes) -> None:
        """Keep an unterminated piece, or start skipping the line once it is too long."""
        if not piece:
            return
        self._held += len(piece)
        if self._held > MAX_LINE:
            self._skipping = self._held
            self._parts, self._held = [], 0
            self.malformed += 1
        else:
            self._parts.append(piece)

    def finish(self) -> Records:
        """Flush the held partial line at end of input (a finished file without a final newline).

        A line cut by a crash is malformed and counted; a complete last record without its
        newline is kept. An over-long last line was counted already.
        """
        tail = b"".join(self._parts)
        self._parts, self._held, self._skipping = [], 0, 0
        if not tail.strip():
            return []
        return self._decode_block(tail)

    @property
    def pending(self) -> int:
        """Bytes of the unfinished last line (held back, or being skipped as over-long)."""
        return self._held + self._skipping

    def _decode_block(self, block: bytes) -> Records:
        fix = has_nonfinite_marker(block)
        if not fix and len(block) <= MAX_LINE:
            fast = _decode_plain(block)
            if fast is not None:
                self.records += len(fast)
                return fast
        out: Records = []
        append = out.append
        decode = _get_decoder()
        for line in block.split(b"\n"):
            if not line or line.isspace():
                continue
            if len(line) > MAX_LINE:
                self.malformed += 1
                continue
            repaired = False
            try:
                obj = decode(line)
            except Exception:
                quoted = repair(line)
                obj = None
                if quoted is not None:
                    with contextlib.suppress(Exception):
                        obj = decode(quoted)
                if obj is None or quoted is None:
                    self.malformed += 1
                    continue
                line, repaired = quoted, True
            if type(obj) is not dict or type(obj.get("kind")) is not str:
                self.malformed += 1
                continue
            if (fix or repaired) and has_nonfinite_marker(line):
                obj = restore(obj)
            if obj["kind"] in _NORMALIZED:
                normalize(obj)
            append(obj)
        self.records += len(out)
        return out


def _decode_plain(block: bytes) -> Records | None:
    """The records of a block whose every non-empty line is a record, decoded in one
    ``map`` (no Python loop per line); ``None`` as soon as one line is not (a corrupt, a
    blank-but-spaces or a non-record line), and the caller decodes the block line by line,
    counting what it skips. The same records either way: this path only runs on blocks
    with no over-long line and no non-finite marker to restore.

    Why: a line loop with its checks cost half as much again as msgspec's decoding itself
    (issue 11's anchor); the common block is all records.
    """
    try:
        objs: list[Any] = list(map(_get_decoder(), filter(None, block.split(b"\n"))))
        if objs and set(map(type, objs)) != _DICT:
            return None
        kinds = set(map(dict.get, objs, repeat("kind")))  # TypeError when one is unhashable
    except Exception:
        return None
    if not all(type(k) is str for k in kinds):
        return None
    if not kinds.isdisjoint(_NORMALIZED):
        for obj in objs:
            if obj["kind"] in _NORMALIZED:
                normalize(obj)
    return objs


_DICT = {dict}


def read_records(path: str, chunk_size: int = 1 << 20) -> tuple[Records, LineDecoder]:
    """Every record of a finished log, and the decoder holding the skip counts.

    Raises ``OSError`` for a missing or unreadable file: the caller turns it into
    a one-line message.
    """
    dec = LineDecoder()
    out: Records = []
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            out.extend(dec.feed(chunk))
    out.extend(dec.finish())
    return out, dec
