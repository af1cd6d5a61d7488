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

import atexit
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
from .jobpath import RUNS_DIR as RUNS_DIR  # re-exported: the default folder
from .jobpath import default_path as default_path
from .lifecycle import (
    attach_notes,
    closing_notes,
    exit_record,
    exit_status,
    hook_gradients,
    hook_loop,
    install_crash,
    open_sinks,
    say_error,
    start_sampler,
)
from .loader import TimedLoader
from .records import (
    StepItem,
    StepRecords,
    build_layers,
    build_lazy,
    convert_values,
    eval_item,
    event,
    heartbeat,
    needs_conversion,
)
from .runconfig import (
    CONFIG_EVERY,
    RunConfig,
    amp_section,
    clip_section,
    loader_section,
    optimizer_section,
)
from .schema import (
    EV_EXCEPTION,
    EV_NOTE,
    EV_OOM,
    EV_PHASE,
    EV_SIGNAL,
    EVENT,
    GRAD_SQ_LOCAL,
    LOSS_SCALE,
)
from .whereabouts import AFTER_STEP, COMPUTE, FORWARD, OUTSIDE_LOOP, Whereabouts
from .writer import Writer

if TYPE_CHECKING:
    from .crash import CrashRecorder
    from .loophooks import LoopHooks
    from .system import SystemSampler

T = TypeVar("T")
# a Probe records one run: after close(), steps and a new `with` block record nothing
_CLOSED = "this Probe is closed and records nothing more: make a new Probe for another run"


class Probe:
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
        self._started = False
        self._closed = False
        self._depth = 0  # nested `with probe:` blocks open

    # --- life cycle -----------------------------------------------------------------
    def start(self) -> Probe:
        """Open the sinks, write ``meta``, start the writer (and sampler) threads, hook backward."""
        if self._started:
            if self._closed:  # `with probe:` again, after the first block closed it
                self._error("start", RuntimeError(_CLOSED))
            return self
        self._started = True
        sinks, meta = open_sinks(self.path, self.run_id, self.socket, self.tcp, self._error)
        sinks.extend(self._extra_sinks)
        self._writer = w = Writer(
            sinks, heartbeat=self._heartbeat, heartbeat_every=self.heartbeat_every
        )
        attach_notes(sinks, w.emit)
        self._put = w.put
        self._step_builder = w.register(self._records.build)
        self._layers_builder = w.register(build_layers)
        self._lazy_builder = w.register(build_lazy)
        if meta is not None:
            w.emit(meta)
        self._grad = hook_gradients(
            self.model, self.optimizer, self.scaler, self.layers_every > 0, self._error
        )
        if self._grad is not None:
            self._grad.where = self._where
        self._loop = hook_loop(
            self.model, self._watched_optimizer, self._where, self._on_amp, self._error
        )
        self._learn_start()
        self._where.move(OUTSIDE_LOOP)
        w.start()
        if self._use_system:
            self._sampler = start_sampler(self._emit, self._system_interval, self._error)
        if self._use_crash:
            self._crash = install_crash(
                self._emit, self._flush, lambda: self._last_step, self._error
            )
        atexit.register(self._at_exit)
        self._prev_end = perf_counter()
        return self

    def close(self, status: str = "ok") -> None:
        """Write the ``exit`` event, stop the threads, fsync and close the log. Idempotent."""
        if self._closed or not self._started:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self._at_exit)
        if self._crash is not None:
            with contextlib.suppress(Exception):
                self._crash.uninstall()
        if self._sampler is not None:
            with contextlib.suppress(Exception):
                self._sampler.stop()
        if self._grad is not None:
            with contextlib.suppress(Exception):
                self._grad.remove()
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove()
        self._where.move(OUTSIDE_LOOP)
        self._put = None  # steps after close are ignored
        w = self._writer
        if w is None:
            return
        with contextlib.suppress(Exception):  # a change not written yet: before the exit
            config = self._config.take(None, self._last_step)
            if config is not None:
                w.emit(config)
        closing_notes(w.sinks, w.emit)  # the live socket's counts not yet on record
        exit_rec = exit_record(status, self._last_step, self._steps, w.dropped)
        w.emit(exit_rec)
        w.close()

    def __enter__(self) -> Probe:
        self._depth += 1
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._depth -= 1
        if self._depth > 0:  # a nested `with probe:` (a helper's): the outer block closes
            return False  # an exception goes on to the outer block, which records it
        status, on_record = exit_status(exc, self._signal)
        if on_record and exc is not None and self._crash is not None:
            with contextlib.suppress(Exception):
                self._crash.record(exc)
        self.close(status)
        return False  # the exception, if any, goes on unchanged

    def _at_exit(self) -> None:
        self.close("signal" if self._signal else "exception" if self._crashed else "ok")

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
            why = _CLOSED if self._closed else "Probe.step() before start(): use `with Probe(...)`"
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
            self._next_step = step + 1
            self._last_step = step
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
            if tr is not None and tr.layers is not None:
                self._queue_layers(put, step)
            if not self._steps % CONFIG_EVERY:
                self._refresh_config()
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

    # --- the config event (runconfig.py) ---------------------------------------------------
    def _learn_start(self) -> None:
        """What the probe knows at start: the optimizer, the clip norm given, and the
        AMP section unless a forward will tell its autocast dtype."""
        self._learn_optimizer()
        clip = clip_section(self.clip_norm)
        if clip is not None:
            self._learn("clip", clip)
        loop = self._loop
        if loop is None or not loop.looks_for_amp:  # no forward to look into: the scaler
            self._learn_amp(None, looked=False)  # and the parameters' dtype, if they tell

    def _refresh_config(self) -> None:
        """Every ``CONFIG_EVERY`` steps: the optimizer read again (param groups added, weight
        decay changed), the autocast look armed again until a dtype has been seen."""
        self._learn_optimizer()
        if self._loop is not None:
            self._loop.arm_amp()

    def _learn_optimizer(self) -> None:
        opt = self._watched_optimizer
        if opt is not None:
            try:
                self._learn("optimizer", optimizer_section(opt))
            except Exception as e:
                self._error("config (optimizer)", e)

    def _learn_loader(self, iterable: Any) -> None:
        try:
            self._learn("loader", loader_section(iterable))
        except Exception as e:
            self._error("config (loader)", e)

    def _on_amp(self, dtype: str | None) -> None:
        """The autocast look's answer (loophooks.py), in a training forward."""
        self._learn_amp(dtype, looked=True)

    def _learn_amp(self, dtype: str | None, looked: bool) -> None:
        try:
            params = self._grad.params if self._grad is not None else []
            amp = amp_section(self.scaler, params, dtype, looked)
            if looked or amp["scaler"] or "param_dtype" in amp:  # else: nothing known
                self._learn("amp", amp)
        except Exception as e:
            self._error("config (amp)", e)

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
        self._learn_loader(iterable)
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

    def _emit(self, record: dict[str, Any]) -> None:
        """Queue a record from any thread; events are written at once."""
        w = self._writer
        if w is None:
            return
        if record.get("kind") == EVENT:
            kind = record.get("type")
            if kind == EV_SIGNAL:
                self._signal = str(record.get("signal"))
            elif kind in (EV_EXCEPTION, EV_OOM):
                self._crashed = True
            w.emit(record)
        else:
            w.put(record)

    def _flush(self, fsync: bool) -> None:
        """The crash path's flush: bounded, and read-backs stuck on a hung device are given
        up within the same bound (see ``Writer.flush``), so the event gets written."""
        self.flush(fsync, timeout=3.0)

    def _error(self, where: str, err: BaseException) -> None:
        """The probe's own failure: reported once per place, never raised."""
        if where in self._errors:
            return
        self._errors.add(where)
        say_error(where, err, self._writer)
