"""Values in, records out: the two halves of a step that the probe splits across threads.

On the training thread, :func:`convert_values` keeps numbers as they are, turns host
tensors into numbers and gathers device scalars into one :class:`DeviceBatch` read-back
(no sync). On the writer thread, :class:`StepRecords` turns the queued tuple into the
``step`` dict once that read-back has landed; the other builders do the same for
``eval`` and ``layers`` records. Builders follow the writer's protocol: ``f(item,
force) -> dict | None``, ``None`` meaning "not ready yet".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .gradnorm import layers_record
from .readback import Deadline, DeviceBatch, elapsed_s, host_scalar, is_device
from .schema import EVAL, EVENT, HEARTBEAT, STEP, as_step
from .whereabouts import Whereabouts

OnError = Callable[[str, BaseException], None]

# Where a device value goes back to in a step: LOSS, GRAD_NORM, LR, (LRS, group index),
# or an extra's name (any str, the empty one included: `step(**{"": x})` is legal).
LOSS: str | None = None
GRAD_NORM = ("grad_norm",)
LR = ("lr",)
LRS = "lrs"
Key = str | tuple[str] | tuple[str, int] | None  # one of the above

_NUMBER = (float, int)
# Fields every step record has: an extra by one of these names would be dropped, and one
# named for an eval record's own fields would overwrite them ("kind": 2 is no record).
# Said once, never silently. Other schema names (data_time, mem_*...) fill the field
# when the probe did not measure it.
STEP_OWN = frozenset(("kind", "step", "t", "step_time", "compute_time"))
EVAL_OWN = frozenset(("kind", "step", "t"))
_OWN_FIELD = "a field of every {} record: this metric is not logged, give it another name"


# The queued step, one flat tuple of plain values, from ``Probe.step`` on the training
# thread to ``StepRecords.build`` on the writer's. An exact tuple, not a NamedTuple: the
# garbage collector untracks only exact tuples of atomic values, and a NamedTuple (a
# subclass, whose __new__ is also Python code) more than doubled the cost of a step()
# call (2.2 -> 4.7 us measured). Typed all the same: both ends are checked against
# ``StepItem`` (a value of the wrong type, or a field added on one side only, fails the
# type checker); the names, in order, are STEP_ITEM (tests/probe/test_overload.py checks a
# real queued step against them).
StepItem = tuple[
    int,  # builder: the writer's index of StepRecords.build (Writer.register)
    int,  # step
    float,  # t: wall time of the call
    Any,  # loss: a number or None (a device value waits in ``device``)
    Any,  # grad_norm
    Any,  # lr
    "list[Any] | None",  # lrs: every group's lr, with more than one param group
    "float | None",  # data_time: None without probe.loader()
    float,  # step_time
    "int | None",  # batch_size
    "dict[str, Any] | None",  # extras: None, never an empty dict (GC-tracked)
    "tuple[Any, Any, Any, Any] | None",  # memory: (allocated, reserved, peak, limit)
    "tuple[DeviceBatch, list[Key]] | None",  # device: values read back on the writer thread
    "tuple[float, float] | None",  # phases: (forward_time, backward_time), host seconds
]
STEP_ITEM = (
    "builder",
    "step",
    "t",
    "loss",
    "grad_norm",
    "lr",
    "lrs",
    "data_time",
    "step_time",
    "batch_size",
    "extras",
    "memory",
    "device",
    "phases",
)


def convert_values(
    loss: Any,
    grad_norm: Any,
    extras: dict[str, Any] | None,
    on_error: OnError,
    lr: Any = None,
    lrs: list[Any] | None = None,
) -> tuple[Any, Any, dict[str, Any] | None, tuple[DeviceBatch, list[Any]] | None, Any, Any]:
    """Numbers stay, host tensors become numbers, device scalars go into one read-back.

    Returns ``(loss, grad_norm, extras, dev, lr, lrs)``. Device values come back as
    ``None`` (the writer fills them in from the batch); a value that is not a scalar is
    dropped and reported through ``on_error``. ``lr`` and ``lrs`` may be tensors too
    (``Adam(lr=torch.tensor(...))`` keeps the tensor in its param groups): a CPU one
    becomes a float here, a CUDA one is read back like the loss, without a sync.
    """
    keys: list[Any] = []
    tensors: list[Any] = []
    if loss is not None and type(loss) is not float:
        loss = scalar("loss", loss, LOSS, keys, tensors, on_error)
    if grad_norm is not None and type(grad_norm) is not float:
        grad_norm = scalar("grad_norm", grad_norm, GRAD_NORM, keys, tensors, on_error)
    if lr is not None and type(lr) not in _NUMBER:
        lr = scalar("lr", lr, LR, keys, tensors, on_error)
    if lrs is not None:
        lrs = [
            x
            if x is None or type(x) in _NUMBER
            else scalar("lr", x, (LRS, i), keys, tensors, on_error)
            for i, x in enumerate(lrs)
        ]
    out: dict[str, Any] | None = None
    if extras:
        out = {}
        for k, v in extras.items():
            if k in STEP_OWN:
                on_error(f"metric {k!r}", ValueError(_OWN_FIELD.format("step")))
            elif type(v) is float or type(v) is int or v is None:
                out[k] = v
            else:
                v = scalar(k, v, k, keys, tensors, on_error)
                if v is not None:
                    out[k] = v
    batch = device_batch(tensors, on_error, timing=True)  # the step is recorded either way
    dev = (batch, keys) if batch is not None else None
    return loss, grad_norm, out, dev, lr, lrs


def needs_conversion(loss: Any, grad_norm: Any, lr: Any, lrs: list[Any] | None) -> bool:
    """Whether a step's values hold anything but plain numbers (the common case is no)."""
    return (
        (loss is not None and type(loss) is not float)
        or (grad_norm is not None and type(grad_norm) is not float)
        or (lr is not None and type(lr) is not float and type(lr) is not int)
        or (lrs is not None and any(type(x) is not float for x in lrs))
    )


def scalar(
    name: str, v: Any, key: Key, keys: list[Any], tensors: list[Any], on_error: OnError
) -> Any:
    """One value: a number, or ``None`` with the device tensor appended to ``tensors``."""
    try:
        v = host_scalar(v)
    except Exception as e:
        on_error(f"value of {name!r}", e)
        return None
    if is_device(v):
        if v.numel() != 1:
            on_error(f"value of {name!r}", ValueError(f"not a scalar: shape {tuple(v.shape)}"))
            return None
        keys.append(key)
        tensors.append(v)
        return None
    return v


def heartbeat(
    last_step: int | None, steps: int, where: Whereabouts | None = None
) -> dict[str, Any]:
    """A ``heartbeat`` record: the run is alive at ``last_step``, ``steps`` recorded, and
    the training thread is at ``where`` (its place and since when, in Unix seconds)."""
    rec: dict[str, Any] = {"kind": HEARTBEAT, "t": time.time(), "step": last_step, "steps": steps}
    if where is not None:
        rec["where"], rec["where_since"] = where.read()
    return rec


def event(kind: str, step: int | None, **fields: Any) -> dict[str, Any]:
    """An ``event`` record of type ``kind`` at ``step``, now, with its own fields after."""
    return {"kind": EVENT, "type": kind, "t": time.time(), "step": step, **fields}


def eval_item(
    metrics: dict[str, Any], step: int | None, on_error: OnError
) -> tuple[dict[str, Any], list[Any], DeviceBatch | None]:
    """An ``eval`` record on the training thread: numbers kept, host tensors made numbers,
    device scalars gathered for one read-back (``build_lazy`` fills them in later)."""
    keys: list[Any] = []
    tensors: list[Any] = []
    rec: dict[str, Any] = {"kind": EVAL, "step": step, "t": time.time()}
    for k, v in metrics.items():
        if k in EVAL_OWN:
            on_error(f"eval metric {k!r}", ValueError(_OWN_FIELD.format("eval")))
            continue
        if type(v) is not float and type(v) is not int:
            v = scalar(k, v, k, keys, tensors, on_error)
        if v is not None:
            rec[k] = v
    return rec, keys, device_batch(tensors, on_error)


def device_batch(tensors: list[Any], on_error: OnError, timing: bool = False) -> DeviceBatch | None:
    """One read-back of these device scalars, ``None`` without any, or when it cannot be
    set up (the record goes without them, the probe's error said once)."""
    if not tensors:
        return None
    try:
        return DeviceBatch(tensors, timing=timing)
    except Exception as e:
        on_error("device read-back", e)
        return None


BATCH_MAX = 1 << 53  # samples in one step: past this a rate (samples / seconds) loses digits


def whole_number(value: Any) -> int | None:
    """``step=`` or ``batch_size=`` given as something other than an int: what the log's
    readers take as a step (``schema.as_step``: a whole number within ±2^62, whole floats
    included), after a numpy or CPU tensor scalar becomes a number; None for text, a bool,
    a fraction, NaN, and a device tensor, which reading would sync."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        v = host_scalar(value)
    except Exception:
        return None
    return None if is_device(v) else as_step(v)


def num(v: Any) -> Any:
    """A record value: ints stay ints, host tensors and numpy scalars become numbers.

    A device tensor that reaches this point (it should have gone through a read-back)
    becomes ``None``: reading it here would be a sync.
    """
    if type(v) is float or type(v) is int:
        return v
    try:
        v = host_scalar(v)  # CPU tensors and numpy scalars become numbers, device ones stay
    except Exception:
        return None
    return None if is_device(v) else v


class StepRecords:
    """Builds ``step`` records on the writer thread, in order (device time needs the previous step)."""

    def __init__(self) -> None:
        self._prev_timing_ev: Any = None
        # step records built so far and the newest one's step: what a crash record names
        # once the queue is written (``StartStop._crash_step``)
        self.built = 0
        self.newest: int | None = None

    def build(self, item: StepItem, force: bool | Deadline) -> dict[str, Any] | None:
        _, step, t, loss, gn, lr, lrs, dw, st, bs, extras, mem, dev, phases = item
        rec: dict[str, Any] = {"kind": STEP, "step": step, "t": t}
        device_time = None
        if dev is not None:
            batch, keys = dev
            vals = batch.values(force)
            if vals is None:
                return None
            if len(vals) == len(keys):
                for key, val in zip(keys, vals, strict=True):
                    if key is LOSS:
                        loss = val
                    elif type(key) is tuple:
                        if key is LR:
                            lr = val
                        elif key is GRAD_NORM:
                            gn = val
                        elif lrs is not None and isinstance(group := key[-1], int):
                            lrs[group] = val  # (LRS, group): the probe's own list, this step's
                    elif isinstance(key, str):  # an extra; every extra a device value: no
                        if extras is None:  # dict came with the step
                            extras = {}
                        extras[key] = val
            ev = batch.timing_event
            if ev is not None:
                device_time = elapsed_s(self._prev_timing_ev, ev)
                self._prev_timing_ev = ev
        if loss is not None:
            rec["loss"] = num(loss)
        if gn is not None:
            rec["grad_norm"] = num(gn)
        if lr is not None and (lr := num(lr)) is not None:
            rec["lr"] = lr
        if lrs is not None:
            rec["lrs"] = [num(x) for x in lrs]
        if dw is not None:  # None: no probe.loader(), the data wait is unknown
            rec["data_time"] = dw
        rec["step_time"] = st
        rec["compute_time"] = max(0.0, st - (dw or 0.0))
        if device_time is not None:
            rec["device_time"] = device_time
        if phases is not None:
            rec["forward_time"], rec["backward_time"] = phases
        if bs is not None:
            rec["batch_size"] = bs
            if st > 0:
                rec["samples_per_s"] = bs / st
        if mem is not None:
            alloc, reserved, peak, limit = mem
            rec["mem_allocated"] = alloc
            rec["mem_reserved"] = reserved
            rec["mem_max_allocated"] = peak
            rec["mem_limit"] = limit
        if extras:
            for k, v in extras.items():
                if k not in rec:
                    rec[k] = num(v)
        self.built += 1
        self.newest = step
        return rec


def build_lazy(item: tuple[Any, ...], force: bool | Deadline) -> dict[str, Any] | None:
    """``(build_lazy, record, keys, batch_or_None)``: the record, its device values filled in."""
    _, rec, keys, batch = item
    if batch is not None:
        vals = batch.values(force)
        if vals is None:
            return None
        if len(vals) == len(keys):
            rec.update(zip(keys, vals, strict=True))
    return rec


def build_layers(item: tuple[Any, ...], force: bool | Deadline) -> dict[str, Any] | None:
    """``(build_layers, step, t, taken)``: see :func:`dltop.probe.gradnorm.layers_record`."""
    _, step, t, taken = item
    return layers_record(step, t, taken, force)
