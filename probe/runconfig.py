"""The ``config`` event: what a troubleshooting checklist asks about a run, said once.

Why: "which optimizer, with what momentum and weight decay?", "how many loader
workers, pinned memory?", "autocast in bf16 or fp16, a loss scaler?", "clipping at
what norm?" are the first questions of most checklists, and their answers are in the
training process only. The probe learns each at its own moment (the optimizer at start,
the loader when ``probe.loader()`` wraps it, the autocast dtype in the first training
forward, a framework's precision from its trainer) and writes them as one ``config``
event: the sections known so far, again only when one of them changed.

Cheap by construction: a section is learnt when the probe meets its source (not per
step; the optimizer is read again every ``CONFIG_EVERY`` steps), compared with the
one held, and the event is written by ``Probe.step()`` (before its step record) or by
the writer thread at a heartbeat, whichever comes first: at most one per step interval
(the ``probe.step()`` calls since the last one), and none when nothing changed. The lr
(and ``initial_lr``) of a param group changes with every schedule and is in the step
records: it is no change here, and the groups keep the lr read when the optimizer's
section was last learnt (at first, the initial lr).

Values are JSON scalars and short lists of numbers only, read with ``getattr``: no
tensor is read (a device one would sync), and nothing here imports torch.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .schema import EV_CONFIG, EVENT

MAX_GROUPS = 8  # param groups written; more are counted in "groups_omitted"
MAX_KEYS = 32  # fields per param group
MAX_LIST = 8  # numbers in a list field (betas)
MAX_TEXT = 200  # characters of a text field
# steps between two reads of the optimizer's param groups (and two looks at autocast,
# until a dtype has been seen: loophooks.py)
CONFIG_EVERY = 128
_LR_KEYS = ("lr", "initial_lr")  # schedules move these: never a change of config
_SCALARS = (bool, int, float, str, type(None))
_LOADER_FIELDS = (
    "num_workers",
    "pin_memory",
    "batch_size",
    "persistent_workers",
    "prefetch_factor",
    "drop_last",
)


def _value(v: Any) -> tuple[bool, Any]:
    """``(keep, value)``: a JSON scalar, or a short list of numbers; nothing else."""
    if type(v) in _SCALARS:
        return True, v[:MAX_TEXT] if type(v) is str else v
    if type(v) in (list, tuple) and len(v) <= MAX_LIST and all(type(x) in (int, float) for x in v):
        return True, list(v)
    return False, None


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside a framework's wrapper (Accelerate's
    ``AcceleratedOptimizer.optimizer``, Lightning's ``LightningOptimizer._optimizer``)."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if inner is None or inner is optimizer or not hasattr(inner, "param_groups"):
            break
        optimizer = inner
    return optimizer


def optimizer_section(optimizer: Any) -> dict[str, Any]:
    """``{"class", "groups": [{field: value}]}`` from the param groups, ``params`` and any
    value that is not a JSON scalar or a short list of numbers left out."""
    opt = unwrap_optimizer(optimizer)
    groups = []
    all_groups = list(opt.param_groups)
    for g in all_groups[:MAX_GROUPS]:
        out: dict[str, Any] = {}
        for k, v in g.items():
            if k == "params" or type(k) is not str:
                continue
            keep, v = _value(v)
            if keep:
                out[k] = v
                if len(out) >= MAX_KEYS:
                    break
        groups.append(out)
    section: dict[str, Any] = {"class": type(opt).__name__, "groups": groups}
    if len(all_groups) > MAX_GROUPS:
        section["groups_omitted"] = len(all_groups) - MAX_GROUPS
    return section


def loader_section(iterable: Any) -> dict[str, Any]:
    """The loader's class, and a ``DataLoader``'s settings when it has them (duck-typed:
    anything with ``num_workers``); a generator is ``{"class": "generator"}``."""
    section: dict[str, Any] = {"class": type(iterable).__name__}
    if hasattr(iterable, "num_workers"):
        for name in _LOADER_FIELDS:
            keep, v = _value(getattr(iterable, name, None))
            if keep:
                section[name] = v
    return section


def clip_section(max_norm: Any, norm_type: Any = 2.0) -> dict[str, Any] | None:
    """``{"max_norm", "norm_type"}`` of norm clipping, ``None`` when it is off (no value,
    or one that is not a positive number)."""
    if type(max_norm) not in (int, float) or not max_norm > 0:
        return None
    return {"max_norm": float(max_norm), "norm_type": float(norm_type)}


def amp_section(
    scaler: Any, params: list[Any], dtype: str | None = None, looked: bool = False
) -> dict[str, Any]:
    """``{"dtype", "scaler"}`` (and ``param_dtype`` when the parameters are not float32):
    ``dtype`` is the autocast dtype seen in a training forward (``None``: no autocast),
    left out when no forward was looked at (``looked``); ``scaler`` whether an enabled ``GradScaler``
    was given (``is_enabled()`` reads a flag, no sync)."""
    section: dict[str, Any] = {}
    if looked:
        section["dtype"] = dtype
    on = scaler is not None
    if on:
        try:
            on = bool(scaler.is_enabled())
        except Exception:
            pass  # not a torch GradScaler: given, so taken as on
    section["scaler"] = on
    if params:
        name = str(getattr(params[0], "dtype", "")).removeprefix("torch.")
        if name and name != "float32":
            section["param_dtype"] = name
    return section


def _comparable(name: str, value: Any) -> Any:
    """The section as compared: an optimizer's groups without their lr."""
    if name != "optimizer" or type(value) is not dict:
        return value
    groups = [{k: v for k, v in g.items() if k not in _LR_KEYS} for g in value.get("groups", ())]
    return {**value, "groups": groups}


class RunConfig:
    """The sections learnt so far and the last ones written.

    ``learn`` runs on the training thread (or an adapter's callback), ``take`` there or
    on the writer thread: the lock is taken only when a section changed or an event is
    due, never on a step where nothing did (``pending`` is read first).
    """

    def __init__(self) -> None:
        self._sections: dict[str, Any] = {}
        self._written: dict[str, Any] | None = None  # comparable form of the last event
        self._written_in = -1  # the step interval (steps recorded) of the last event
        # re-entrant: a signal handler runs on the training thread between two bytecodes,
        # and a user's SIGTERM handler that calls ``probe.close()`` takes this lock again
        # (close writes a change not written yet). Landing while ``learn`` or ``take`` held
        # a plain lock, it waited for its own thread forever: the process hung, its exit
        # never written. Re-entered, the state is the one before or after the interrupted
        # assignment, both of them whole (tests/probe/test_signal_reentry.py)
        self._lock = threading.RLock()
        self.pending = False  # a section changed since the last event

    def learn(self, name: str, value: Any) -> None:
        """Hold ``value`` as section ``name``; a section equal but for its lr is kept as
        it was (its first lr stays)."""
        with self._lock:
            old = self._sections.get(name)
            if old is not None and _comparable(name, old) == _comparable(name, value):
                return
            self._sections[name] = value
            self.pending = True

    def take(self, steps: int | None, step: int | None) -> dict[str, Any] | None:
        """The ``config`` event due now, or ``None``: nothing changed since the last one,
        or one was written in this step interval already (``steps``: steps recorded so
        far; the change waits for the next interval). ``steps=None`` at close: a change
        not written yet is written now, whatever the interval."""
        if not self.pending:
            return None
        with self._lock:
            if not self.pending or (steps is not None and steps == self._written_in):
                return None
            self.pending = False
            sections = dict(self._sections)
            key = {k: _comparable(k, v) for k, v in sections.items()}
            if key == self._written:
                return None  # changed and changed back
            self._written = key
            self._written_in = -1 if steps is None else steps
        return {"kind": EVENT, "type": EV_CONFIG, "t": time.time(), "step": step, **sections}
