"""``Probe``: the three lines a user adds to a training loop.

The training thread pays for a tuple appended to a deque per step (a few µs);
everything else (dicts, JSON, device read-backs, I/O, system sampling) happens on
the probe's own threads. The probe never raises into the training loop because of
its own failure: its step logic reports the first error of each kind once and
carries on.

CUDA memory fields are read at most every ``memory_every`` seconds (0.2 s by
default) and attached to that step only: see ``cudastep.py`` for why.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .cudastep import CudaStep, cuda_step_for
from .filesink import Sink
from .gradnorm import GradNormTracker
from .jobpath import AUTO, default_run_id, nowhere_to_write
from .jobpath import default_path as default_path  # re-exported: demos/quickstart.py imports it
from .lifecycle import say_error
from .loader import TimedLoader
from .records import (
    BATCH_MAX,
    StepItem,
    StepRecords,
    convert_values,
    eval_item,
    event,
    heartbeat,
    needs_conversion,
    whole_number,
)
from .runconfig import CONFIG_EVERY, RunConfig
from .runsetup import learn_amp, learn_loader, refresh_config
from .schema import EV_NOTE, EV_PHASE, GRAD_SQ_LOCAL, LOSS_SCALE
from .startstop import CLOSED, StartStop
from .whereabouts import AFTER_STEP, COMPUTE, FORWARD, OUTSIDE_LOOP, Whereabouts

if TYPE_CHECKING:
    from .crash import CrashRecorder
    from .loophooks import LoopHooks
    from .system import SystemSampler
    from .writer import Writer

T = TypeVar("T")


class Probe(StartStop):
    """Records a training run to a JSONL log (see ``docs/log-format.md``).

    Args:
        path: the log file. By default ``dltop-runs/<YYYYmmdd-HHMMSS>-<pid>.jsonl``, and
            for one rank of a multi-process job (torchrun: ``RANK``, ``WORLD_SIZE > 1``)
            ``dltop-runs/<job>/rank<R>.jsonl``, ``<job>`` shared by the job's ranks (see
            ``dltop.probe.jobpath``); the folder is created and an existing file is
            appended to, never truncated (an elastic restart adds a new segment).
            ``None`` (or ``""``) for no file.
        model: a ``torch.nn.Module``; when given, the global gradient norm before
            clipping and the per-layer figures are measured during backward.
        optimizer: its param groups give ``lr`` (and ``lrs`` with several groups);
            without a model, its parameters are watched for the grad norm.
        scaler: the AMP ``GradScaler`` when there is one, so that the measured norm is
            the one of the unscaled gradient (without it the norm is ``scale`` times too big);
            each step then records the scaler's ``loss_scale`` too (read without a sync).
        clip_norm: the max norm you clip the gradient at (``clip_grad_norm_(..., clip_norm)``),
            if you do: written in the ``config`` event, so that the viewer can compare the
            measured pre-clip ``grad_norm`` with it. The probe never clips.
        socket: serve the records live to viewers on a Unix socket in a per-user private
            directory, where ``dltop`` and ``dltop ls`` find the run (on by default).
        tcp: also serve on TCP, ``"HOST:PORT"``; loopback needs no token unless
            ``$DLTOP_TOKEN`` is set (then it is required on any address); any other
            address gets one (``$DLTOP_TOKEN`` or generated; where to find it is printed
            once, never the token). A ``$DLTOP_TOKEN`` under 16 characters, a bad spec or
            a port in use costs only the TCP listener (one warning); ``socket=False`` with
            ``tcp=`` serves TCP only. Connections and viewers are bounded (docs/live.md,
            Limits); what was turned away is counted in the log.
        sinks: extra sinks (objects with ``write(bytes)`` and ``close()``) that receive
            every batch of lines.
        layers_every: steps between two ``layers`` records (per-layer grad norms and
            fractions of exactly-zero gradient elements); 0 turns them off.
        heartbeat_every: seconds between ``heartbeat`` records from the writer thread.
        memory_every: minimum seconds between two reads of the CUDA memory counters.
        system: start the sampler thread (process RSS/CPU, NVML GPUs) at ~1 Hz.
        crash: record exceptions, uncaught exceptions and SIGTERM/SIGINT.
        run_id: the run's id in ``meta``; by default the log's file name without
            ``.jsonl``, and ``<job>.rank<R>`` for a default rank file.

    ``path=None`` with no socket and no sink is an error: there would be nowhere to
    write.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = AUTO,
        model: Any = None,
        optimizer: Any = None,
        *,
        scaler: Any = None,
        clip_norm: float | None = None,
        socket: bool = True,
        tcp: str | None = None,
        sinks: Iterable[Sink] = (),
        layers_every: int = 50,
        heartbeat_every: float = 2.0,
        memory_every: float = 0.2,
        system: bool = True,
        system_interval: float = 1.0,
        crash: bool = True,
        run_id: str | None = None,
    ) -> None:
        self._extra_sinks = list(sinks)
        if path is not AUTO and path is not None:
            path = os.fspath(path) or None  # "" means no file, like None
        no_dest = nowhere_to_write("Probe", path, socket, tcp, self._extra_sinks)
        if no_dest is not None:
            raise no_dest
        self.path: str | None = default_path() if path is AUTO else path
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self.clip_norm = clip_norm
        self.socket = bool(socket)
        self.tcp = tcp
        self.layers_every = max(0, int(layers_every))
        self.heartbeat_every = float(heartbeat_every)
        self.memory_every = float(memory_every)
        self.run_id = run_id or default_run_id(self.path, path is AUTO)
        self._use_system = system
        self._system_interval = system_interval
        self._use_crash = crash

        # training-thread state
        self._next_step = 0
        self._last_step: int | None = None
        self._steps = 0
        self._batch_t = 0.0  # perf_counter when probe.loader() last handed out a batch
        self._data_wait = 0.0
        self._loader_used = False
        self._loader_bs: int | None = None
        self._prev_end = perf_counter()
        self._grad: GradNormTracker | None = None
        self._cuda: CudaStep | Literal[False] | None = None  # decided at the first step
        self._records = StepRecords()  # its builder runs on the writer thread
        self._where = Whereabouts()  # where the loop is, for heartbeats (whereabouts.py)
        # where a batch handed out by probe.loader() puts the loop: forward with a model
        # (whose hooks then split forward from backward), compute without one
        self._batch_place = FORWARD if model is not None else COMPUTE
        self._config = RunConfig()  # the `config` event's sections (runconfig.py)
        # the optimizer whose step is hooked and whose param groups are read for the config:
        # the one given, or an adapter's real one behind its lr snapshot (set before start)
        self._watched_optimizer = optimizer
        self._loop: LoopHooks | None = None  # forward and optimizer-step hooks (loophooks.py)
        # the writer's indices of the builders (see Writer.register), set at start()
        self._step_builder = self._layers_builder = self._lazy_builder = -1
        self._errors: set[str] = set()
        self._signal: str | None = None
        self._crashed = False

        self._writer: Writer | None = None
        self._put: Callable[[Any], None] | None = None  # the writer's queue: tuples, records
        self._sampler: SystemSampler | None = None
        self._crash: CrashRecorder | None = None
        self._lifecycle_state()  # started, closed, and how far each got (startstop.py)
        self._depth = 0  # nested `with probe:` blocks open

    # --- the hot path -----------------------------------------------------------------
    def step(
        self,
        loss: Any = None,
        *,
        grad_norm: Any = None,
        lr: Any = None,
        batch_size: int | None = None,
        step: int | None = None,
        **extras: Any,
    ) -> None:
        """Record one optimisation step. Values passed explicitly win over measured ones.

        ``loss``, ``grad_norm`` and ``extras`` may be Python numbers or 0-d tensors
        (CPU or CUDA; CUDA ones are read back later without a sync).
        """
        now = perf_counter()
        put = self._put
        if put is None:  # closed, or never started: not recorded (said once)
            why = CLOSED if self._closed else "Probe.step() before start(): use `with Probe(...)`"
            self._error("step", RuntimeError(why))
            return
        where = self._where
        where.since = now  # after the step: the loop goes on from here (whereabouts.py)
        where.place = AFTER_STEP
        try:
            if self._config.pending:  # a config change: its event comes before this step
                config = self._config.take(self._steps, self._last_step)
                if config is not None:
                    put(config)
            if step is None:
                step = self._next_step
            elif type(step) is not int:
                step = self._whole("step", step, self._next_step)
            self._next_step = step + 1
            self._steps += 1
            dw = self._data_wait if self._loader_used else None
            self._data_wait = 0.0
            prev = self._prev_end
            st = now - prev
            self._prev_end = now
            tr = self._grad
            phases = None
            if tr is not None:
                times = tr.take_times()
                bt = self._batch_t  # a batch handed out during this step, or no split
                if times is not None and prev <= bt <= times[0]:
                    phases = (times[0] - bt, times[1] - times[0])
                every = self.layers_every
                grad_norm, err = tr.on_step(grad_norm, self._steps % every == 0 if every else None)
                if err is not None:
                    self._error("grad norm", err)
                if tr.latest_sq is not None:  # sharded gradients: this rank's share (gradnorm.py)
                    extras.setdefault(GRAD_SQ_LOCAL, tr.take_sq())
            sc = self.scaler
            if sc is not None and (scale := getattr(sc, "_scale", None)) is not None:
                # the scale's device tensor, read back like the loss (get_scale() syncs)
                extras.setdefault(LOSS_SCALE, scale)
            lrs = None
            if lr is None:
                opt = self.optimizer
                if opt is not None:
                    groups = opt.param_groups
                    lr = groups[0]["lr"]
                    if len(groups) > 1:
                        lrs = [g["lr"] for g in groups]
            dev = None
            ex: dict[str, Any] | None = extras
            if extras or needs_conversion(loss, grad_norm, lr, lrs):
                # tensors (loss, a tensor lr...) become numbers now, or one device read-back
                loss, grad_norm, ex, dev, lr, lrs = convert_values(
                    loss, grad_norm, extras, self._error, lr, lrs
                )
            if batch_size is None:
                batch_size = self._loader_bs
            elif type(batch_size) is not int or not 0 <= batch_size < BATCH_MAX:
                batch_size = self._whole("batch_size", batch_size, None, BATCH_MAX)
            self._loader_bs = None  # the loader sums the next step's batches from zero
            mem = None
            cu = self._cuda
            if cu is not False:
                if cu is None:
                    cu = self._cuda = cuda_step_for(self.model, self.memory_every) or False
                if cu:
                    dev, mem = cu.step(now, dev)
            item: StepItem = (
                self._step_builder,
                step,
                time.time(),
                loss,
                grad_norm,
                lr,
                lrs,
                dw,
                st,
                batch_size,
                ex or None,  # an empty dict would keep the tuple GC-tracked
                mem,
                dev,
                phases,
            )
            put(item)
            # the step reached, once its record is queued; a crash record reads it through
            # ``_crash_step`` (a signal can be taken inside ``put``, on either side of the
            # append, before this line)
            self._last_step = step
            if tr is not None and tr.layers is not None:
                self._queue_layers(put, step)
            if not self._steps % CONFIG_EVERY:
                refresh_config(self)
        except Exception as e:
            self._error("step", e)

    def _queue_layers(self, put: Callable[[Any], None], step: int) -> None:
        """``put`` is the step's own: a ``close()`` on another thread meanwhile sets
        ``self._put`` to None, and the layers of that last step still go to the queue."""
        taken = self._grad.take_layers() if self._grad is not None else None
        if taken is not None:
            put((self._layers_builder, step, time.time(), taken))

    def _heartbeat(self) -> dict[str, Any]:
        """On the writer thread: the heartbeat, after a config change the loop has not
        written yet (a loop stuck before its next step: a first batch that never comes)."""
        where = self._where
        if self._config.pending and where.place is not OUTSIDE_LOOP:
            config = self._config.take(self._steps, self._last_step)
            if config is not None and self._writer is not None:
                self._writer.emit(config)
        return heartbeat(self._last_step, self._steps, where)

    # --- the config event (runsetup.py, runconfig.py) -----------------------------------
    def _on_amp(self, dtype: str | None) -> None:
        """The autocast look's answer (loophooks.py), in a training forward."""
        learn_amp(self, dtype, looked=True)

    def _learn(self, name: str, value: Any) -> None:
        """A section of the ``config`` event (an adapter's ``precision`` and ``clip`` too)."""
        self._config.learn(name, value)

    # --- other records --------------------------------------------------------------
    def eval(self, **metrics: Any) -> None:
        """An ``eval`` record at the current step (numbers or scalar tensors)."""
        put = self._put  # the queue as it is now: a close() meanwhile cannot make it None
        if put is None:
            return
        try:
            rec, keys, batch = eval_item(metrics, self._last_step, self._error)
            put((self._lazy_builder, rec, keys, batch))
            self._writer.wake()  # type: ignore[union-attr]
        except Exception as e:
            self._error("eval", e)

    def note(self, text: str, **fields: Any) -> None:
        """Free text on record (an ``event`` of type ``note``), with any extra fields."""
        try:
            self._emit({**fields, **event(EV_NOTE, self._last_step, text=str(text))})
        except Exception as e:
            self._error("note", e)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Declare a phase (eval, checkpoint...): the viewer pauses its stall watch meanwhile."""
        self._emit(event(EV_PHASE, self._last_step, name=name, state="begin"))
        try:
            yield
        finally:
            self._emit(event(EV_PHASE, self._last_step, name=name, state="end"))
            # the phase (and any data it loaded) is not part of the next step's time
            self._prev_end = perf_counter()
            self._data_wait = 0.0
            self._loader_bs = None

    def loader(self, iterable: Iterable[T], infer_batch_size: bool = True) -> TimedLoader[T]:
        """Wrap the data loader: the wait in each ``next()`` becomes the step's ``data_time``;
        its settings (workers, pinned memory, batch size...) go in the ``config`` event."""
        learn_loader(self, iterable)
        return TimedLoader(iterable, self, infer_batch_size)

    def flush(self, fsync: bool = False, timeout: float = 5.0) -> bool:
        """Block until everything recorded so far is written (and fsynced when asked)."""
        return self._writer.flush(fsync, timeout) if self._writer is not None else True

    @property
    def steps(self) -> int:
        """Steps recorded so far."""
        return self._steps

    @property
    def last_step(self) -> int | None:
        return self._last_step

    @property
    def warnings(self) -> list[str]:
        """What the probe warned about (write failures, its own errors)."""
        return list(self._writer.warnings) if self._writer is not None else []

    # --- internals -----------------------------------------------------------------
    def _loader_started(self, t0: float) -> None:
        self._loader_used = True
        if self._steps == 0:
            self._prev_end = t0  # the first step is timed from the first next()
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(Exception):
                loop.drop_forward()  # the loader marks forward from now on

    def _whole(self, name: str, value: Any, default: Any, bound: int | None = None) -> Any:
        """``value`` as a whole number (``records.whole_number``), else ``default``, said
        once: a wrongly typed ``step=`` or ``batch_size=`` must not cost the step its
        loss (the record could not be built, and was dropped whole)."""
        n = whole_number(value)
        if n is not None and (bound is None or 0 <= n < bound):
            return n
        want = "a whole number" if bound is None else f"a whole number from 0 to {bound - 1}"
        self._error(
            f"{name}=",
            ValueError(f"{name}= takes {want}, not this {type(value).__name__}: not recorded"),
        )
        return default

    def _error(self, where: str, err: BaseException) -> None:
        """The probe's own failure: reported once per place, never raised."""
        if where in self._errors:
            return
        self._errors.add(where)
        say_error(where, err, self._writer)
