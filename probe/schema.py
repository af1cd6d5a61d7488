"""The dltop log format, v1: the one definition that the probe and the viewer share.

A log is JSON Lines, one record per line, UTF-8. Every record has a ``kind``. The
probe writes with :func:`encode_record`; every reader (viewer, ``dltop check``,
tests) goes through :class:`LineDecoder`, so that the tolerance rules (unknown
kinds and fields kept, malformed and partial lines skipped and counted, never an
exception) hold everywhere at once.

This module is imported by the training process, so it uses only the standard
library at import time; ``msgspec`` is picked up lazily when it is installed
(it is a runtime dependency of the distribution) and the stdlib ``json`` is the
fallback, producing the same bytes.

Non-finite floats are written as the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (the protobuf JSON convention) instead of the bare tokens that
``json.dumps`` emits and strict parsers reject. Decoding turns them back into
floats wherever they stand as a value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from typing import Any

SCHEMA_VERSION = 1

# Record kinds. Readers must ignore kinds they do not know.
META = "meta"  # first line: schema version "v", run id, host, pid, rank, versions, devices
STEP = "step"  # one training step
EVAL = "eval"  # evaluation metrics at a step
SYS = "sys"  # sampled system metrics (process RSS/CPU, NVML per GPU)
EVENT = "event"  # exception, oom, signal, exit, phase, note
HEARTBEAT = "heartbeat"  # the writer thread is alive; lets a viewer tell stalled from finished
LAYERS = "layers"  # per-parameter grad norms and zero-gradient fractions, every N steps
KINDS = (META, STEP, EVAL, SYS, EVENT, HEARTBEAT, LAYERS)

# Fields of a ``step`` record the probe knows about. Anything else is a user extra.
STEP_FIELDS = (
    "step",  # int, counts from 0 or the user's own step number
    "t",  # float, Unix seconds at the end of the step
    "loss",  # float
    "grad_norm",  # float, global L2 norm of the accumulated gradient, before clipping
    # float, sharded gradients (FSDP, DTensor) instead of grad_norm: this rank's share of the
    # squared norm; the sum over the job's ranks at one step is grad_norm ** 2
    "grad_sq_local",
    "lr",  # float, the first param group's learning rate
    "lrs",  # list[float], every param group's lr, only when there is more than one group
    "data_time",  # float s, time blocked in the data loader's next()
    "step_time",  # float s, wall time from the previous step's end to this one's
    "compute_time",  # float s, step_time - data_time
    "device_time",  # float s, CUDA event time of the step, read back when complete
    # host clock, probe.loader() and model= needed (the probe's backward hooks): batch
    # ready -> first gradient of the step's last backward, and first -> last gradient; in
    # data-parallel training the fast ranks' wait for a slow one sits in backward_time
    "forward_time",  # float s
    "backward_time",  # float s
    "batch_size",  # int, samples in the step when known
    "samples_per_s",  # float, batch_size / step_time
    "mem_allocated",  # int bytes, torch.cuda.memory_allocated
    "mem_reserved",  # int bytes, torch.cuda.memory_reserved
    "mem_max_allocated",  # int bytes, torch.cuda.max_memory_allocated
    "mem_limit",  # int bytes, the device's total memory (or the per-process cap)
)

GRAD_SQ_LOCAL = "grad_sq_local"  # see STEP_FIELDS; its presence marks a sharded grad norm

# ``event`` record ``type`` values.
EV_EXCEPTION = "exception"  # any exception that ended the run (type, message, traceback)
EV_OOM = "oom"  # out of memory, with a ``memory`` object of allocator state
EV_SIGNAL = "signal"  # SIGTERM / SIGINT received (``signal`` name)
EV_EXIT = "exit"  # the probe closed (``status``: "ok" | "exception" | "signal" | "interrupted")
EV_PHASE = "phase"  # a declared phase (``name``: "eval", "checkpoint"...; ``state``: begin/end)
EV_NOTE = "note"  # free text the probe or the user wants on record
EV_WARNING = "warning"  # the probe degraded (e.g. could not write the file): ``message``
# records went missing: ``records`` (this gap), ``total`` (so far), ``scope``: "log" (the
# probe's queue was full: the log itself lacks them) or "viewer" (one live viewer fell
# behind and the socket skipped them for it only; the log has them)
EV_DROPPED = "dropped"
# the live socket's answer to a viewer it will not serve (a wrong token): ``message``;
# sent on the socket only, never written to a log, so not one of EVENT_TYPES
EV_REFUSED = "refused"
EVENT_TYPES = (
    EV_EXCEPTION,
    EV_OOM,
    EV_SIGNAL,
    EV_EXIT,
    EV_PHASE,
    EV_NOTE,
    EV_WARNING,
    EV_DROPPED,
)

# The longest line a reader accepts. The probe's longest records (a ``layers`` record of
# a model with thousands of parameter tensors, a bounded traceback) are far below it;
# anything longer is skipped and counted as malformed instead of being held in memory.
MAX_LINE = 8 << 20  # bytes, newline excluded

_NONFINITE_OUT = {math.inf: "Infinity", -math.inf: "-Infinity"}
_NONFINITE_IN = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# the markers as they stand in a line, each after one of its letters that numbers and
# lower-case keys never hold: a block without that letter (memchr, ~50x faster than the
# marker's own search) cannot hold the marker
_MARKER_GATES = ((b"N", b'"NaN"'), (b"I", b'Infinity"'))


def has_nonfinite_marker(data: bytes) -> bool:
    """Whether ``data`` may hold a non-finite marker to restore (exact: the marker itself)."""
    return any(gate in data and marker in data for gate, marker in _MARKER_GATES)


def _finite_or_marker(x: float) -> float | str:
    if x != x:
        return "NaN"
    return _NONFINITE_OUT.get(x, x)


def sanitize(value: Any) -> Any:
    """Return ``value`` with every non-finite float replaced by its string marker.

    Containers are copied only when they hold something to replace, so the common
    all-finite record costs one pass and no allocation.
    """
    if isinstance(value, float):  # float subclasses too: numpy.float64 NaN must not become null
        return value if math.isfinite(value) else _finite_or_marker(value)
    if type(value) is int:
        return value if _INT_MIN <= value <= _INT_MAX else _big_int(value)
    if isinstance(value, dict):
        for v in value.values():
            if _needs_sanitizing(v):
                return {k2: sanitize(v2) for k2, v2 in value.items()}
        return value
    if isinstance(value, (list, tuple)):
        if any(_needs_sanitizing(v) for v in value):
            return [sanitize(v) for v in value]
        return value
    return value


# Integers a reader's int64 and float columns hold; a user value beyond them (a loss of
# 10**400 from integer arithmetic, say) is written as the float it stands for, and as
# "Infinity"/"-Infinity" beyond the float range: the contract's encoding, not 400 digits.
_INT_MAX = (1 << 63) - 1
_INT_MIN = -(1 << 63)


def _big_int(value: int) -> float | str:
    try:
        return float(value)
    except OverflowError:
        return "Infinity" if value > 0 else "-Infinity"


def _needs_sanitizing(v: Any) -> bool:
    if isinstance(v, float):
        return not math.isfinite(v)
    if type(v) is int:
        return not _INT_MIN <= v <= _INT_MAX
    if isinstance(v, (dict, list, tuple)):
        return sanitize(v) is not v
    return False


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
        return _NONFINITE_IN.get(value, value)
    if isinstance(value, dict) and value.get("kind") == META:
        return value
    get = _NONFINITE_IN.get
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


def _json_default(obj: Any) -> Any:
    """Last resort for values json cannot encode (numpy scalars, tensors, paths)."""
    if isinstance(obj, float):  # float subclasses msgspec does not take as floats
        return sanitize(float(obj))
    if isinstance(obj, int):
        return int(obj)
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return sanitize(item())
        except Exception:  # a multi-element tensor, say
            pass
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        try:
            return sanitize(tolist())
        except Exception:
            pass
    return str(obj)


_encoder: Callable[[Any], bytes] | None = None


def _get_encoder() -> Callable[[Any], bytes]:
    global _encoder
    if _encoder is None:
        try:
            import msgspec  # lazy: only the writer thread and the viewer ever get here

            enc = msgspec.json.Encoder(enc_hook=_json_default)
            _encoder = enc.encode
        except ImportError:  # pragma: no cover - msgspec is a declared dependency

            def _stdlib(obj: Any) -> bytes:
                return json.dumps(
                    obj, separators=(",", ":"), allow_nan=False, default=_json_default
                ).encode()

            _encoder = _stdlib
    return _encoder


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one line of bytes, newline included, non-finite floats as strings."""
    return _get_encoder()(sanitize(record)) + b"\n"


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


def normalize(record: dict[str, Any]) -> dict[str, Any]:
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


def decode_line(line: bytes | str) -> dict[str, Any] | None:
    """One line to a record, or ``None`` when it is not a JSON object with a ``kind``."""
    if isinstance(line, str):
        line = line.encode()
    line = line.strip()
    if not line or len(line) > MAX_LINE:
        return None
    try:
        obj = _get_decoder()(line)
    except Exception:
        return None
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

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
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

    def finish(self) -> list[dict[str, Any]]:
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

    def _decode_block(self, block: bytes) -> list[dict[str, Any]]:
        fix = has_nonfinite_marker(block)
        if not fix and len(block) <= MAX_LINE:
            fast = _decode_plain(block)
            if fast is not None:
                self.records += len(fast)
                return fast
        out: list[dict[str, Any]] = []
        append = out.append
        decode = _get_decoder()
        for line in block.split(b"\n"):
            if not line or line.isspace():
                continue
            if len(line) > MAX_LINE:
                self.malformed += 1
                continue
            try:
                obj = decode(line)
            except Exception:
                self.malformed += 1
                continue
            if type(obj) is not dict or type(obj.get("kind")) is not str:
                self.malformed += 1
                continue
            if fix and has_nonfinite_marker(line):
                obj = restore(obj)
            if obj["kind"] in _NORMALIZED:
                normalize(obj)
            append(obj)
        self.records += len(out)
        return out


def _decode_plain(block: bytes) -> list[dict[str, Any]] | None:
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


def iter_records(lines: Iterable[bytes | str]) -> Iterator[dict[str, Any]]:
    """Records from an iterable of lines, skipping whatever does not decode."""
    for line in lines:
        rec = decode_line(line)
        if rec is not None:
            yield rec


def read_records(path: str, chunk_size: int = 1 << 20) -> tuple[list[dict[str, Any]], LineDecoder]:
    """Every record of a finished log, and the decoder holding the skip counts.

    Raises ``OSError`` for a missing or unreadable file: the caller turns it into
    a one-line message.
    """
    dec = LineDecoder()
    out: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            out.extend(dec.feed(chunk))
    out.extend(dec.finish())
    return out, dec


def as_float(value: Any) -> float | None:
    """A record value as a float, ``None`` when absent or not numeric (bools excluded).

    An integer beyond the float range (JSON allows ``1e400`` written out as 401 digits)
    is ±infinity, the value a float would have overflowed to: never an exception.
    """
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        return _NONFINITE_IN.get(value)
    return None


# Steps the viewer can hold: its step axis is int64 and it adds to steps; a log's step
# beyond this is not a step (nobody trains for 2**62 steps) and is treated as absent.
MAX_STEP = 1 << 62


def as_step(value: Any) -> int | None:
    """A record's ``step`` as an int, ``None`` when absent, not a whole number, or beyond
    ±:data:`MAX_STEP`. Whole floats (``12.0``, written by some tools) count."""
    if type(value) is int:
        return value if -MAX_STEP < value < MAX_STEP else None
    if type(value) is float and value.is_integer() and -MAX_STEP < value < MAX_STEP:
        return int(value)
    return None
