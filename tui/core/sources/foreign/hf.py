"""Hugging Face Trainer ``trainer_state.json``: its ``log_history`` as our records.

Each ``log_history`` entry is one of: a training log (``loss``, ``grad_norm``,
``learning_rate``, ``epoch``, ``step``; the loss is the Trainer's mean over the last
``logging_steps`` optimizer steps), an evaluation (``eval_loss``, ``eval_*``), or the
end-of-training summary (``train_runtime``, ``train_loss``...), which becomes an ``exit``
event: the Trainer got to its end. There is no wall time in the file.

Read in bounded memory: msgspec parses the document once into the state's few scalar
fields and one ``Raw`` slice per ``log_history`` entry (zero-copy views of the mapped
file), and each entry is decoded only when its batch is converted. A 64 MiB state took
1-4 GB as Python objects (issue 29), and a bigger one was refused; now the file's pages
and a batch are what it costs. A state msgspec cannot take (an integer of 5 000 digits)
is read the old way, whole, when it is small enough.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import msgspec

from .....probe.schema import Record, Records, as_float
from .common import (
    BATCH,
    EVAL,
    HF,
    MAX_ENTRIES,
    MAX_EXTRAS,
    STEP,
    ForeignLog,
    MappedFile,
    SourceError,
    exit_record,
    meta_record,
    number,
    skipped_note,
    step_of,
)
from .names import EVAL_OWN, STEP_OWN

# log_history keys → our step fields
TRAIN_FIELDS = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr", "epoch": "epoch"}
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "total_flos")
EVAL_PREFIX = "eval_"
EVAL_SPEED = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
MAX_ENTRY_FALLBACK = 1 << 20  # bytes of one entry read by Python's json when msgspec cannot
MAX_CONTAINERS = MAX_ENTRIES + 1000  # objects and lists parsed from one file (an upper bound)
STATE_KEYS = ("global_step", "max_steps", "logging_steps", "eval_steps", "num_train_epochs")
EVAL_SPEED_SUFFIXES = ("runtime", "samples_per_second", "steps_per_second", "_flos")
# our own step fields: an extra of that name is kept as "x/<name>", never over ours


def _stopping(state: dict[str, Any]) -> bool:
    """The state says the Trainer was ending the run: ``global_step`` reached ``max_steps``,
    or ``should_training_stop`` was set (early stopping, or the last step). The summary
    entry is written after the last checkpoint is saved, so a checkpoint's own
    trainer_state.json never has it: without this, a finished run read from its last
    checkpoint would look cut short."""
    gs, ms = state.get("global_step"), state.get("max_steps")
    if type(gs) is int and type(ms) is int and 0 < ms <= gs:  # not bool, not a string
        return True
    control = state.get("stateful_callbacks")
    control = control.get("TrainerControl") if isinstance(control, dict) else None
    args = control.get("args") if isinstance(control, dict) else None
    return isinstance(args, dict) and args.get("should_training_stop") is True


def _parse_int(text: str) -> int | float:
    """JSON integers: a huge one becomes a float (±inf beyond range), never a ValueError
    from Python's digit limit."""
    return int(text) if len(text) <= 18 else float(text)


class _State(msgspec.Struct):
    """What is read of a trainer_state.json: the scalars we report and one raw slice per
    ``log_history`` entry (decoded later, one batch at a time)."""

    # its bytes, not its objects: decoding it here would build every entry at once
    log_history: msgspec.Raw = msgspec.Raw()  # empty: the key is missing
    global_step: Any = None
    max_steps: Any = None
    logging_steps: Any = None
    eval_steps: Any = None
    num_train_epochs: Any = None
    stateful_callbacks: Any = None


_STATE = msgspec.json.Decoder(_State)
_HISTORY = msgspec.json.Decoder(list[msgspec.Raw])
_ENTRY = msgspec.json.Decoder()
# Python's json writes NaN and infinities bare; JSON (and msgspec) has no such tokens: they
# are quoted before parsing (``number`` reads "NaN" back). One pass that steps over strings
# whole, so "NaN" in a key or a text value ("a: NaN, b") stays as it is; it never
# backtracks (possessive), and a string left open takes the rest (a cut file: corrupt)
_STRING = rb'"[^"\\]*+(?:\\[\s\S][^"\\]*+)*+"'
_TO_BARE = re.compile(
    rb"(?:" + _STRING + rb'|"[\s\S]*+|[^"NI\-]++|-(?!Infinity)|N(?!aN)|I(?!nfinity))*+'
    rb"(-?Infinity|NaN)?"
)


def _quoted(data: Any) -> Any:
    if data.find(b"NaN") < 0 and data.find(b"Infinity") < 0:  # (`in` walks an mmap bytewise)
        return data
    pieces, last = [], 0
    for m in _TO_BARE.finditer(data):
        if m[1] is not None:
            pieces += [data[last : m.start(1)], b'"', m[1], b'"']
            last = m.end()
    return b"".join([*pieces, data[last:]])


def _decode(data: Any) -> tuple[_State, Any]:
    head = _STATE.decode(data)
    raw = head.log_history
    if bytes(memoryview(raw)[:1]) != b"[":
        return head, None  # no log_history list
    return head, _HISTORY.decode(raw)


def _corrupt(path: str, where: str = "it") -> SourceError:
    return SourceError(
        f"{path}: corrupt trainer_state.json (JSON error at {where}) — "
        "a checkpoint cut while being written? pass another checkpoint's file"
    )


def _check_shape(obj: Any, path: str) -> None:
    if not isinstance(obj, dict):
        raise SourceError(f"{path}: not a trainer_state.json (not a JSON object)")
    if not isinstance(obj.get("log_history"), list):
        raise SourceError(
            f"{path}: not a trainer_state.json (no log_history list) — "
            "pass the trainer_state.json from a Trainer checkpoint folder"
        )


def parse(blob: bytes, path: str) -> dict[str, Any]:
    """The whole state as Python objects: the fallback for what msgspec cannot take."""
    # memory is bounded by the objects parsed, not the bytes: 64 MiB of "{}," is 21 M dicts
    containers = blob.count(b"{") + blob.count(b"[")
    if containers > MAX_CONTAINERS:
        raise SourceError(
            f"{path}: {containers} JSON objects and lists, over dltop's limit of "
            f"{MAX_CONTAINERS} for a trainer_state.json — not a Trainer's state?"
        )
    try:
        # utf-8-sig: a byte-order mark (an editor saved the state) is skipped, not corrupt
        obj = json.loads(blob.decode("utf-8-sig", errors="replace"), parse_int=_parse_int)
    except ValueError as exc:
        where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "it"
        raise _corrupt(path, where) from None
    except RecursionError:
        raise SourceError(f"{path}: corrupt trainer_state.json (nested too deep)") from None
    _check_shape(obj, path)
    return obj


def _read(path: str) -> tuple[dict[str, Any], list[Any], MappedFile | None]:
    """The state's scalars, its entries (raw slices, or parsed dicts in the fallback) and
    the mapped file the slices point into."""
    mapped = MappedFile(path, "trainer_state.json")
    data = _quoted(mapped.data)
    try:
        head, history = _decode(data)
        if history is None:  # a JSON object (the struct took it) without the list: said
            # without decoding the whole file into objects (1.5 GB for 150 MB of them)
            mapped.close()
            _check_shape({}, path)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        whole = mapped.data  # up to MAX_FILE_BYTES the file's bytes, read in; beyond, a map
        mapped.close()
        if isinstance(whole, bytes):
            # what msgspec does not take (a 400-digit integer, 1e999) Python's json may:
            # the old way, whole, which also words a corrupt file's error by its line
            state = parse(whole, path)
            return state, state["log_history"], None
        if isinstance(exc, RecursionError):
            raise SourceError(f"{path}: corrupt trainer_state.json (nested too deep)") from None
        where = str(exc).rsplit("(", 1)[-1].rstrip(")") if "(byte" in str(exc) else "it"
        raise _corrupt(path, where) from None
    state = {k: getattr(head, k) for k in (*STATE_KEYS, "stateful_callbacks")}
    return state, history, mapped


def _entry(raw: Any) -> Any:
    if isinstance(raw, msgspec.Raw):
        try:
            return _ENTRY.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return _entry_slow(raw)
    return raw


def _entry_slow(raw: msgspec.Raw) -> Any:
    """An entry msgspec does not take (1e999 or an integer of 5 000 digits: out of its
    range; bytes that are no UTF-8), read as the whole-file fallback reads it (±infinity,
    U+FFFD); None (counted as skipped) when it is no JSON either, or too long for that."""
    if len(raw) > MAX_ENTRY_FALLBACK:
        return None
    try:
        text = bytes(memoryview(raw)).decode("utf-8", errors="replace")
        return json.loads(text, parse_int=_parse_int)
    except (ValueError, RecursionError):
        return None


# keys of a training log entry that are no metric of the step: its identity, the Trainer's
# summary and speed figures
_NOT_EXTRA = frozenset(("step", *TRAIN_FIELDS, *SUMMARY_KEYS, "train_loss", "total_flos"))


def _extras(entry: dict[str, Any], rec: Record, kept: dict[str, str]) -> None:
    """The entry's other numbers (``rewards/chosen``, ``mean_token_accuracy``...) as extras
    of the step, by their own names (``x/<name>`` where the name is one of our fields), the
    first :data:`MAX_EXTRAS` names met; what the viewer's ``m`` charts."""
    for key, value in entry.items():
        if not isinstance(key, str) or key in _NOT_EXTRA or key.startswith(EVAL_PREFIX):
            continue
        name = kept.get(key)
        if name is None:
            if len(kept) >= MAX_EXTRAS or len(key) > 200 or key.endswith(EVAL_SPEED_SUFFIXES):
                continue
            name = f"x/{key}" if key in STEP_OWN else key  # never over our own fields
            kept[key] = name
        f = number(value)
        if f is not None:
            rec[name] = f


def load(path: str, shown: str | None = None) -> ForeignLog:
    """Open ``path`` (a trainer_state.json; ``shown`` is the path the user gave, a folder)
    and check its shape now; its entries are converted as :meth:`ForeignLog.batches`
    reads them."""
    state, history, mapped = _read(path)
    log = ForeignLog(HF, shown or path, [path])

    def stream(log: ForeignLog) -> Iterator[Records]:
        try:
            yield from _convert(log, state, history)
        finally:
            if mapped is not None:
                history.clear()  # the raw slices go before the map they point into
                mapped.close()

    log.stream = stream
    return log


def _convert(log: ForeignLog, state: dict[str, Any], history: list[Any]) -> Iterator[Records]:
    notes = [
        "another tool's log: no wall time, step time, data time, memory or GPU readings; "
        "each loss is the Trainer's mean over logging_steps steps"
    ]
    info = {k: state.get(k) for k in STATE_KEYS}
    # finite numbers only (as_float: no bool, no text; an int past the float range, on
    # which math.isfinite raises, is infinite there)
    info = {k: v for k, v in info.items() if (f := as_float(v)) is not None and math.isfinite(f)}
    meta = meta_record(HF, log.path, notes, trainer_state=info or None)
    skipped = 0
    extra_skipped = max(0, len(history) - MAX_ENTRIES)
    ended: int | None = None
    finished = False
    last_step: int | None = None
    body: Records = [meta]
    extras: dict[str, str] = {}  # the training log's other keys kept, and their field names
    for n, raw in enumerate(history):
        if n >= MAX_ENTRIES:
            break
        entry = _entry(raw)
        if not isinstance(entry, dict):
            skipped += 1
            continue
        step = step_of(entry.get("step"))
        if step is None:
            skipped += 1
            continue
        if any(k in entry for k in SUMMARY_KEYS):
            finished, ended = True, step
            continue
        made = False
        if "loss" in entry or "grad_norm" in entry or "learning_rate" in entry:
            rec: Record = {"kind": STEP, "step": step}
            for key, name in TRAIN_FIELDS.items():
                if key in entry:
                    f = number(entry[key])
                    if f is None:
                        skipped += 1
                    else:
                        rec[name] = f
            if len(rec) > 2:
                _extras(entry, rec, extras)
                body.append(rec)
                made = True
        evals = [k for k in entry if isinstance(k, str) and k.startswith(EVAL_PREFIX)]
        if evals:
            ev: dict[str, Any] = {"kind": EVAL, "step": step}
            for key in evals:
                if key in EVAL_SPEED or len(ev) >= MAX_EXTRAS + 2:
                    continue
                f = number(entry[key])
                if f is None:
                    continue  # an eval text field (a model name) is not a metric
                name = "loss" if key == "eval_loss" else key[len(EVAL_PREFIX) :]
                ev[f"x/{name}" if name in EVAL_OWN else name] = f  # not over "step", "kind"
            if len(ev) > 2:
                body.append(ev)
                made = True
        if made:
            last_step = step
        else:
            skipped += 1
        if len(body) >= BATCH:
            yield body
            body = []
    skipped += extra_skipped
    if skipped:
        notes.append(skipped_note(skipped, "log_history entries or values"))
    if extra_skipped:
        notes.append(f"warning: only the first {MAX_ENTRIES} log_history entries were read")
    if not finished and last_step is not None and _stopping(state):
        finished, ended = True, last_step
    if finished:
        body.append(exit_record(ended if ended is not None else last_step))
    log.skipped = skipped
    log.said(meta, notes)
    if body:
        yield body


def looks_like(head: bytes, name: str) -> bool:
    """A JSON object whose first kilobytes name a ``log_history``, or a ``*.json`` file that
    starts like a JSON object (a truncated or damaged state is then named as such)."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    return b'"log_history"' in head or name.endswith(".json")
