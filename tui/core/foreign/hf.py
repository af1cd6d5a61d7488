"""Hugging Face Trainer ``trainer_state.json``: its ``log_history`` as our records.

Each ``log_history`` entry is one of: a training log (``loss``, ``grad_norm``,
``learning_rate``, ``epoch``, ``step``; the loss is the Trainer's mean over the last
``logging_steps`` optimizer steps), an evaluation (``eval_loss``, ``eval_*``), or the
end-of-training summary (``train_runtime``, ``train_loss``...), which becomes an ``exit``
event: the Trainer got to its end. There is no wall time in the file.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dltop.tui.core.foreign.common import (
    EVAL,
    HF,
    MAX_ENTRIES,
    MAX_EXTRAS,
    STEP,
    ForeignLog,
    SourceError,
    exit_record,
    meta_record,
    number,
    read_capped,
    skipped_note,
    step_of,
)

# log_history keys → our step fields
TRAIN_FIELDS = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr", "epoch": "epoch"}
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "total_flos")
EVAL_PREFIX = "eval_"
EVAL_SPEED = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
MAX_CONTAINERS = MAX_ENTRIES + 1000  # objects and lists parsed from one file (an upper bound)
STATE_KEYS = ("global_step", "max_steps", "logging_steps", "eval_steps", "num_train_epochs")


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


def parse(blob: bytes, path: str) -> dict[str, Any]:
    # memory is bounded by the objects parsed, not the bytes: 64 MiB of "{}," is 21 M dicts
    containers = blob.count(b"{") + blob.count(b"[")
    if containers > MAX_CONTAINERS:
        raise SourceError(
            f"{path}: {containers} JSON objects and lists, over dltop's limit of "
            f"{MAX_CONTAINERS} for a trainer_state.json — not a Trainer's state?"
        )
    try:
        obj = json.loads(blob.decode("utf-8", errors="replace"), parse_int=_parse_int)
    except ValueError as exc:
        where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "it"
        raise SourceError(
            f"{path}: corrupt trainer_state.json (JSON error at {where}) — "
            "a checkpoint cut while being written? pass another checkpoint's file"
        ) from None
    except RecursionError:
        raise SourceError(f"{path}: corrupt trainer_state.json (nested too deep)") from None
    if not isinstance(obj, dict):
        raise SourceError(f"{path}: not a trainer_state.json (not a JSON object)")
    if not isinstance(obj.get("log_history"), list):
        raise SourceError(
            f"{path}: not a trainer_state.json (no log_history list) — "
            "pass the trainer_state.json from a Trainer checkpoint folder"
        )
    return obj


def load(path: str, shown: str | None = None) -> ForeignLog:
    """Read ``path`` (a trainer_state.json); ``shown`` is the path the user gave (a folder)."""
    state = parse(read_capped(path, "trainer_state.json"), path)
    history: list[Any] = state["log_history"]
    log = ForeignLog(HF, shown or path, [path])
    skipped = 0
    extra_skipped = max(0, len(history) - MAX_ENTRIES)
    ended: int | None = None
    finished = False
    body: list[dict[str, Any]] = []
    last_step: int | None = None
    for entry in history[:MAX_ENTRIES]:
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
            rec: dict[str, Any] = {"kind": STEP, "step": step}
            for key, name in TRAIN_FIELDS.items():
                if key in entry:
                    f = number(entry[key])
                    if f is None:
                        skipped += 1
                    else:
                        rec[name] = f
            if len(rec) > 2:
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
                ev["loss" if key == "eval_loss" else key[len(EVAL_PREFIX) :]] = f
            if len(ev) > 2:
                body.append(ev)
                made = True
        if made:
            last_step = step
        else:
            skipped += 1
    skipped += extra_skipped
    notes = [
        "another tool's log: no wall time, step time, data time, memory or GPU readings; "
        "each loss is the Trainer's mean over logging_steps steps"
    ]
    if skipped:
        notes.append(skipped_note(skipped, "log_history entries or values"))
    if extra_skipped:
        notes.append(f"warning: only the first {MAX_ENTRIES} log_history entries were read")
    info = {k: state.get(k) for k in STATE_KEYS}
    info = {
        k: v
        for k, v in info.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }
    log.records.append(meta_record(HF, log.path, notes, trainer_state=info or None))
    log.records.extend(body)
    if not finished and last_step is not None and _stopping(state):
        finished, ended = True, last_step
    if finished:
        log.records.append(exit_record(ended if ended is not None else last_step))
    log.skipped = skipped
    log.notes = notes
    return log


def looks_like(head: bytes, name: str) -> bool:
    """A JSON object whose first kilobytes name a ``log_history``, or a ``*.json`` file that
    starts like a JSON object (a truncated or damaged state is then named as such)."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    return b'"log_history"' in head or name.endswith(".json")
