"""What the framework adapters (``dltop.probe.lightning``, ``dltop.probe.hf``) share.

A framework owns the training loop, so the adapter sees it only through callbacks that
fire at points the framework chose. This module holds the framework-neutral part: which
keyword arguments are ``Probe``'s, the log path of each rank (``rankpath.py``), the step being assembled
from several callbacks (micro-batch losses, data wait, the learning rate the optimizer
used), phases opened in one callback and closed in another, and the crash record. Every
method that a callback calls swallows its own errors (reported once by the probe): an
adapter must never be the reason a training dies.

Standard library only at import time, like the rest of the probe; the framework modules
import their framework at their top, and only a user's explicit import loads them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .loader import batch_size_of
from .rankpath import rank_path
from .whereabouts import DATA_WAIT, FORWARD

if TYPE_CHECKING:
    from .probe import Probe

# taken from the trainer, never from the user: two sources of truth would disagree
_FROM_TRAINER = ("model", "optimizer")
_EVAL_PREFIXES = (
    *("val_", "val/", "valid_", "valid/", "validation_", "validation/"),
    *("eval_", "eval/"),
)
_EVAL_SPEED = ("runtime", "samples_per_second", "steps_per_second", "epoch")


def probe_kwargs(owner: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` checked against ``Probe``'s signature, at the user's own line.

    A typo (``layer_every=``) would otherwise surface only at the first ``fit``, inside
    the framework, or never; a ``TypeError`` naming the valid keys is the clear error.
    """
    from .jobpath import AUTO, nowhere_to_write
    from .probe import Probe

    params = inspect.signature(Probe.__init__).parameters
    valid = [n for n in params if n != "self" and n not in _FROM_TRAINER]
    taken = [k for k in kwargs if k in _FROM_TRAINER]
    if taken:
        raise TypeError(
            f"{owner}() takes the model and optimizer from the trainer; "
            f"drop {', '.join(k + '=' for k in taken)}"
        )
    unknown = [k for k in kwargs if k not in valid]
    if unknown:
        raise TypeError(
            f"{owner}() got unknown keyword argument(s) {', '.join(map(repr, unknown))}; "
            f"the keywords are Probe's: {', '.join(valid)}"
        )
    no_dest = nowhere_to_write(
        owner,
        kwargs.get("path", AUTO),
        kwargs.get("socket", True),
        kwargs.get("tcp"),
        kwargs.get("sinks"),
    )
    if no_dest is not None:
        raise no_dest
    return dict(kwargs)


def missing_framework(e: ImportError, packages: tuple[str, ...], what: str) -> ImportError:
    """The one-line error of an adapter whose framework is not installed, ``what`` naming
    it and the extra to install. ``e`` itself, re-raised, when the missing module is not one
    of ``packages``: a broken install inside the framework must show its own traceback."""
    if (e.name or "").split(".")[0] not in packages:
        raise e
    return ImportError(what)


def open_session(
    kwargs: dict[str, Any],
    rank: int,
    world: int,
    model: Any,
    scaler: Any,
    optimizer: Any,
    config: dict[str, Any] | None = None,
) -> Session:
    """The started probe of one ``fit``/``train``: the user's ``Probe`` keywords, one log
    per rank, the framework's AMP ``scaler`` unless given, and the lr from a snapshot of
    ``optimizer`` (the first step record comes before any optimizer step). The real
    ``optimizer`` is the one whose step is hooked and whose param groups go in the
    ``config`` event, with the trainer's own sections in ``config`` (``precision``;
    ``clip``, which wins over a ``clip_norm=`` given to the callback)."""
    from .jobpath import AUTO as auto
    from .probe import Probe

    kw = dict(kwargs)
    path, run_id = rank_path(kw.pop("path", auto), auto, rank, world)
    if run_id is not None and not kw.get("run_id"):
        kw["run_id"] = run_id
    if kw.get("scaler") is None:
        kw["scaler"] = scaler
    lrs = LrSnapshot()
    probe = Probe(path=path, model=model, optimizer=lrs, **kw)
    probe._watched_optimizer = optimizer  # never the snapshot: no step, no other field
    if optimizer is not None:
        lrs.take(optimizer)
    probe.start()
    for name, value in (config or {}).items():
        if value is not None:
            probe._learn(name, value)
    return Session(probe, lrs)


def eval_name(key: str) -> str | None:
    """A framework's eval metric under the name the rules read (``val_loss`` -> ``loss``);
    ``None`` for the speed figures of the evaluation itself (not the model's)."""
    low = key.lower()
    for prefix in _EVAL_PREFIXES:
        if low.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix) :]
            break
    if key.lower() in _EVAL_SPEED:
        return None
    if key.endswith("_epoch") and len(key) > 6:
        key = key[:-6]  # Lightning's on_step+on_epoch name for the epoch value
    return key


class LrSnapshot:
    """Stands in for the optimizer in ``Probe``: the learning rates the optimizer used
    for the step, copied before the framework's scheduler moved them on.

    Both frameworks step the scheduler before the callback that closes the step (Lightning
    in the batch loop, the Trainer before ``on_step_end``); reading the optimizer there
    would give the next step's lr. ``Probe`` only reads ``param_groups[i]["lr"]``.
    """

    def __init__(self) -> None:
        self.param_groups: list[dict[str, Any]] = []

    def take(self, optimizer: Any) -> None:
        """Copy the lr of every param group (a tensor lr is cloned: schedulers edit it in place)."""
        groups = []
        for g in optimizer.param_groups:
            lr = g.get("lr")
            if hasattr(lr, "detach"):
                lr = lr.detach().clone()
            groups.append({"lr": lr, "params": ()})  # the model's hooks, never these
        self.param_groups = groups


class StepState:
    """One optimizer step assembled across callbacks: the micro-batch losses (kept on the
    device, summed without a read-back), samples, and whether the optimizer stepped."""

    def __init__(self) -> None:
        self.loss: Any = None
        self.micro = 0
        self.samples: int | None = None
        self.stepped = False

    def add(self, loss: Any, batch: Any = None) -> None:
        if loss is not None:
            if hasattr(loss, "detach"):
                loss = loss.detach()
            self.loss = loss if self.loss is None else self.loss + loss
            self.micro += 1
        if batch is not None:
            bs = batch_size_of(batch)
            if bs is not None:
                self.samples = bs if self.samples is None else self.samples + bs

    def reset(self) -> None:
        self.loss = None
        self.micro = 0
        self.samples = None
        self.stepped = False


class Session:
    """The probe of one ``fit``/``train`` call and the bookkeeping around it."""

    def __init__(self, probe: Probe, lrs: LrSnapshot) -> None:
        self.probe = probe
        self.lrs = lrs
        self.step = StepState()
        self._phases: list[contextlib.AbstractContextManager[None]] = []
        self._wait_from: float | None = None  # when the loop started waiting for a batch

    @property
    def live(self) -> bool:
        return not self.probe._closed

    def guard(self, where: str, fn: Callable[[], None]) -> None:
        """Run ``fn``; a failure is the probe's own, reported once, never raised."""
        try:
            fn()
        except Exception as e:
            self.probe._error(f"{where} (adapter)", e)

    # --- data wait -------------------------------------------------------------------
    def wait_begins(self) -> None:
        self._wait_from = t = perf_counter()
        self.probe._where.move(DATA_WAIT, t)

    def wait_ends(self) -> None:
        """The framework's fetch returned: the wait since ``wait_begins`` is data time."""
        start, self._wait_from = self._wait_from, None
        t = perf_counter()
        self.probe._where.move(FORWARD, t)  # a batch handed out (the adapters have a model)
        if start is not None:
            self.add_wait(t - start)

    def mark(self, place: str) -> None:
        """The loop is at ``place`` now (``whereabouts.py``): the heartbeats say it."""
        self.probe._where.move(place)

    def batch_ready(self) -> None:
        """The step's forward starts now: the probe splits forward/backward from here, and
        the heartbeats say ``forward`` (the module's own forward may never be called:
        Lightning's ``training_step`` calls its layers)."""
        self.probe._batch_t = perf_counter()
        self.probe._where.forward()

    def add_wait(self, seconds: float) -> None:
        p = self.probe
        p._data_wait += seconds
        p._loader_used = True

    # --- phases ----------------------------------------------------------------------
    def begin_phase(self, name: str) -> None:
        cm = self.probe.phase(name)
        cm.__enter__()
        self._phases.append(cm)

    def end_phase(self) -> None:
        if self._phases:
            self._phases.pop().__exit__(None, None, None)
            self._wait_from = None  # the phase is not data wait either

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A phase around a framework call; the call's own exceptions pass unchanged."""
        entered = False
        try:
            self.begin_phase(name)
            entered = True
        except Exception as e:
            self.probe._error("phase (adapter)", e)
        try:
            yield
        finally:
            if entered:
                try:
                    self.end_phase()
                except Exception as e:
                    self.probe._error("phase (adapter)", e)

    # --- the step --------------------------------------------------------------------
    def finish_step(self, step: int | None, loss_factor: float = 1.0) -> None:
        """``probe.step()`` with the step's loss (times ``loss_factor``), samples, lr."""
        s = self.step
        loss = s.loss
        if loss is not None and loss_factor != 1.0:
            loss = loss * loss_factor
        samples = s.samples
        s.reset()
        self.probe.step(loss=loss, batch_size=samples, step=step)

    def eval_record(self, metrics: Iterable[tuple[Any, Any]]) -> None:
        """An ``eval`` record of the framework's metrics under the names the rules read
        (:func:`eval_name`; of two keys that give one name, the first wins)."""
        out: dict[str, Any] = {}
        for key, value in metrics:
            name = eval_name(str(key))
            if name is not None and name not in out:
                out[name] = value
        if out:
            self.probe.eval(**out)

    # --- the end ---------------------------------------------------------------------
    def crashed(self, exc: BaseException) -> None:
        """Record ``exc`` the way ``with Probe(...)`` does (an interrupt is no crash), close."""
        p = self.probe
        self._phases.clear()  # the phase ends with the exception: the crash record follows
        with contextlib.suppress(Exception):
            p.__exit__(type(exc), exc, exc.__traceback__)

    def close(self) -> None:
        while self._phases:
            with contextlib.suppress(Exception):
                self.end_phase()
        self.probe.close("ok")


class Patches:
    """Methods of one framework object replaced by wrappers for the length of a run, and
    put back after it: the framework calls ``self.method(...)``, so an instance attribute
    takes the call without subclassing anything the user owns. Put back only where the
    wrapper is still in place (someone may have patched over it since)."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any, bool, Any]] = []

    def wrap(self, obj: Any, name: str, make: Callable[[Any], Any]) -> None:
        had = name in vars(obj)
        prev = vars(obj).get(name)
        new = make(getattr(obj, name))
        setattr(obj, name, new)
        self._undo.append((obj, name, new, had, prev))

    def undo(self) -> None:
        while self._undo:
            obj, name, new, had, prev = self._undo.pop()
            with contextlib.suppress(Exception):
                if vars(obj).get(name) is new:
                    if had:
                        setattr(obj, name, prev)
                    else:
                        delattr(obj, name)


def framework_note(session: Session, framework: str, version: str, **fields: Any) -> None:
    """One ``note`` event saying which adapter wrote the log and how the trainer is set."""
    session.guard(
        "note",
        lambda: session.probe.note(
            f"dltop {framework} adapter", framework=framework, framework_version=version, **fields
        ),
    )


class CallbackBase:
    """What both ``DltopCallback`` classes keep: the user's ``Probe`` keywords (checked at
    their line), the session of the run in progress and the framework methods wrapped for it."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._kwargs = probe_kwargs("DltopCallback", kwargs)
        self._session: Session | None = None
        self._patches = Patches()

    @property
    def probe(self) -> Probe | None:
        """The probe of the run in progress (or the last one), for ``note()`` and tests."""
        return self._session.probe if self._session is not None else None

    def _live(self) -> Session | None:
        """The session while its probe is open, else ``None``: callbacks then do nothing."""
        s = self._session
        return s if s is not None and s.live else None

    def _end(self) -> None:
        self._patches.undo()
        s = self._live()
        if s is not None:
            s.guard("close", s.close)
