"""The dltop log format, v1: the one vocabulary that the probe and the viewer share.

A log is JSON Lines, one record per line, UTF-8. Every record has a ``kind``. This module
names the kinds, the step fields and the event types, and says how a reader takes a
number or a step out of a record (:func:`as_float`, :func:`as_step`). How a record
becomes a line is :mod:`dltop.probe.encoding` (the probe writes with ``encode_record``);
how lines become records is :mod:`dltop.probe.decoding` (every reader, viewer, ``dltop
check`` and tests, goes through its ``LineDecoder``, so that the tolerance rules hold
everywhere at once).

This module is imported by the training process, so it uses only the standard library.

Non-finite floats are written as the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (the protobuf JSON convention) instead of the bare tokens that
``json.dumps`` emits and strict parsers reject (:data:`NONFINITE_IN` maps them back).
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA_VERSION = 1

# A record as a reader holds it once decoded: a JSON object whose values are untrusted
# (a log, a socket and another tool's log are written by anyone). ``object``, not
# ``Any``: the type checker then refuses a value used as a number, a string or a list
# before the reader has looked at what it is (``as_float``, ``as_step``, ``type(x) is``).
# ``Any`` stays only where JSON enters: the decoder's output and a foreign file's parse.
Record = dict[str, object]
Records = list[Record]

# Record kinds. Readers must ignore kinds they do not know.
META = "meta"  # first line: schema version "v", run id, host, pid, rank, versions, devices
STEP = "step"  # one training step
EVAL = "eval"  # evaluation metrics at a step
SYS = "sys"  # sampled system metrics (process RSS/CPU, NVML per GPU)
EVENT = "event"  # exception, oom, signal, exit, phase, note, config...
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
    # float, with Probe(scaler=...): the AMP GradScaler's scale at this step (read back
    # from its device tensor like a CUDA loss, never with get_scale(), which syncs)
    "loss_scale",
)

GRAD_SQ_LOCAL = "grad_sq_local"  # see STEP_FIELDS; its presence marks a sharded grad norm
LOSS_SCALE = "loss_scale"  # see STEP_FIELDS; a GradScaler's scale

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
# what troubleshooting checklists ask, written when first learnt and again on a change:
# ``optimizer``, ``loader``, ``amp``, ``clip``, ``precision`` sections (each when known)
EV_CONFIG = "config"
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
    EV_CONFIG,
)

# A ``heartbeat`` record's ``where``: the place of the training thread when it was written
# (``where_since``: Unix seconds it entered that place). See probe/whereabouts.py.
WHERE_OUTSIDE_LOOP = "outside_loop"  # before the first loop activity, after the Probe block
WHERE_DATA_WAIT = "data_wait"  # blocked in next() of probe.loader()
WHERE_FORWARD = "forward"  # batch handed out / forward began, no gradient of the step yet
WHERE_COMPUTE = "compute"  # batch handed out, the probe has no model to split the step
WHERE_BACKWARD = "backward"  # first gradient -> end of backward (DDP: the all-reduce wait)
WHERE_OPTIMIZER = "optimizer"  # inside optimizer.step()
WHERE_AFTER_STEP = "after_step"  # backward or optimizer step ended, or probe.step() returned
WHERE_PLACES = (
    WHERE_OUTSIDE_LOOP,
    WHERE_DATA_WAIT,
    WHERE_FORWARD,
    WHERE_COMPUTE,
    WHERE_BACKWARD,
    WHERE_OPTIMIZER,
    WHERE_AFTER_STEP,
)

# The longest line a reader accepts. The probe's longest records (a ``layers`` record of
# a model with thousands of parameter tensors, a bounded traceback) are far below it;
# anything longer is skipped and counted as malformed instead of being held in memory.
MAX_LINE = 8 << 20  # bytes, newline excluded

# The non-finite markers, as values a reader turns back into floats
NONFINITE_IN = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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
        return NONFINITE_IN.get(value)
    return None


# Steps the viewer can hold: its step axis is int64 and it adds to steps; a log's step
# beyond this is not a step (nobody trains for 2**62 steps) and is treated as absent.
MAX_STEP = 1 << 62


def step_or(record: Record | None, default: int | None) -> int | None:
    """The step a record says it belongs to when that is an int within ±:data:`MAX_STEP`,
    else ``default`` (the latest training step, usually). Stricter than :func:`as_step`:
    the records that carry it (events, evals, layers) are the probe's, which writes an int
    or nothing."""
    step = record.get("step") if record is not None else None
    return step if type(step) is int and -MAX_STEP < step < MAX_STEP else default


def as_step(value: Any) -> int | None:
    """A record's ``step`` as an int, ``None`` when absent, not a whole number, or beyond
    ±:data:`MAX_STEP`. Whole floats (``12.0``, written by some tools) count."""
    if type(value) is int:
        return value if -MAX_STEP < value < MAX_STEP else None
    if type(value) is float and value.is_integer() and -MAX_STEP < value < MAX_STEP:
        return int(value)
    return None
