"""Hugging Face ``Trainer`` in one line: ``Trainer(..., callbacks=[DltopCallback(path=...)])``.

A ``TrainerCallback`` sees less than the probe needs: no callback receives the loss
(``on_log`` gets a mean over ``logging_steps`` steps, on logging steps only, with NaN and
inf losses replaced by ``logging_nan_inf_filter``), ``logs["grad_norm"]`` arrives only on
logging steps, ``on_pre_optimizer_step`` runs after clipping, and evaluation and saving
have no "begin" event. So at ``on_train_begin`` the adapter finds the ``Trainer`` running
it (the caller's frame: callbacks get no reference to it) and wraps, for the length of
``train()``, four of its methods on that instance only:

- ``training_step``: its return value is the micro-batch's loss exactly as the Trainer
  sums it into its own logged loss (already scaled for gradient accumulation, per-token
  with ``num_items_in_batch``); the step's loss is that sum over the step's micro-batches,
  kept on the device until the probe reads it back. Its start also marks the forward.
- ``get_batch_samples``: the Trainer fetches all micro-batches of a step there, so the
  time inside is the step's data wait, and the batches give its sample count.
- ``evaluate`` and ``_save_checkpoint``: run inside ``eval`` and ``checkpoint`` phases,
  so neither reads as a stall.

An exception leaving any of them is recorded like ``with Probe(...)`` records it; so is
one raised by any other callback (the callback handler's ``call_event`` is wrapped too);
and one raised anywhere else in the loop (the optimizer's step, the scheduler), which
leaves ``train()`` without ``on_train_end``, is noticed by ``trainwatch.py`` and closes
the log with exit status ``exception`` (a caller that catches it, a notebook, no longer
leaves the log saying the run finished). The
grad norm is the probe's own end-of-backward hooks on the model's parameters (before
``max_grad_norm`` clipping, after DDP's all-reduce, unscaled with the fp16
``GradScaler``); the lr is copied in ``on_optimizer_step``, before the scheduler steps;
``on_step_end`` writes the step, numbered ``state.global_step - 1`` (from 0);
``on_evaluate`` writes the ``eval`` record (``eval_loss`` as ``loss``); the optimizer's
param groups (its step hooked for the heartbeats' ``where``), the precision and
``max_grad_norm`` go in the ``config`` event. If the Trainer
cannot be found (a custom loop calling the callbacks), steps still get grad norm and lr,
without loss; a note in the log says so.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from time import perf_counter
from typing import Any

from .adapter import (
    CallbackBase,
    Session,
    framework_note,
    missing_framework,
    open_session,
)
from .runconfig import clip_section
from .trainwatch import TrainWatch, frame_of
from .whereabouts import DATA_WAIT, FORWARD

try:
    import torch
    import transformers
except ImportError as _e:  # only the missing package itself gets the short message
    raise missing_framework(
        _e,
        ("transformers", "torch"),
        "dltop.probe.hf needs Hugging Face transformers: pip install 'dltop-monitor[hf]'",
    ) from None

__all__ = ["DltopCallback"]

_FRAMES = 12  # how far up the stack the Trainer may be (call_event, on_train_begin, ...)


def find_trainer() -> Any:
    """The ``transformers.Trainer`` whose loop called this callback, or ``None``."""
    frame = sys._getframe(1)
    for _ in range(_FRAMES):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if isinstance(obj, transformers.Trainer):
            return obj
    return None


def _numbers(metrics: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The metrics that are numbers (a model name, a list: not a metric)."""
    for key, value in metrics.items():
        if isinstance(value, int | float | torch.Tensor) and not isinstance(value, bool):
            yield key, value


def _precision(args: Any) -> str:
    """The Trainer's precision as its arguments say it: ``bf16``, ``fp16`` or ``fp32``."""
    return "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"


class DltopCallback(CallbackBase, transformers.TrainerCallback):
    """Records a ``Trainer.train()`` with the probe; keyword arguments are ``Probe``'s
    (``path``, ``socket``, ``layers_every``...), the model and optimizer come from the
    Trainer. Never raises into training: the probe reports its own failures once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kwargs)
        self._watch: TrainWatch | None = None

    # --- start and end -------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._end()  # a retry (auto_find_batch_size) starts a new segment
        try:
            trainer = find_trainer()
            model = kwargs.get("model")
            if model is None and trainer is not None:
                model = trainer.model
            self._start(args, model, trainer)
        except Exception as e:  # no probe for this run; the training goes on
            sys.stderr.write(f"dltop: warning: no probe for this run ({type(e).__name__}: {e})\n")
            self._end()
            self._session = None

    def _start(self, args: Any, model: Any, trainer: Any) -> None:
        self._watch_train(trainer)
        s = self._session = open_session(
            self._kwargs,
            args.process_index,
            args.world_size,
            model,
            getattr(trainer.accelerator, "scaler", None) if trainer is not None else None,
            trainer.optimizer if trainer is not None else None,
            {"precision": _precision(args), "clip": clip_section(args.max_grad_norm)},
        )
        framework_note(
            s,
            "transformers",
            transformers.__version__,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            max_grad_norm=args.max_grad_norm,
            precision=_precision(args),
            world_size=args.world_size,
            loss="training_step" if trainer is not None else None,
        )
        if trainer is None:
            s.guard("trainer", lambda: s.probe.note("Trainer not found: steps have no loss"))
            return
        self._wrap(trainer, s)

    def _wrap(self, trainer: Any, s: Session) -> None:
        p = self._patches

        def training_step(original: Any) -> Any:
            def step(*a: Any, **kw: Any) -> Any:
                if not s.live:
                    return original(*a, **kw)
                s.guard("batch start", s.batch_ready)
                try:
                    out = original(*a, **kw)
                except BaseException as e:
                    s.crashed(e)
                    raise
                s.guard("loss", lambda: s.step.add(out))
                return out

            return step

        def batches(original: Any) -> Any:
            def get(*a: Any, **kw: Any) -> Any:
                if not s.live:
                    return original(*a, **kw)
                s.guard("where", lambda: s.mark(DATA_WAIT))
                t0 = perf_counter()
                try:
                    out = original(*a, **kw)
                except BaseException as e:
                    s.crashed(e)
                    raise
                s.guard("data wait", lambda: self._fetched(s, perf_counter() - t0, out))
                return out

            return get

        def phased(name: str) -> Any:
            def make(original: Any) -> Any:
                def run(*a: Any, **kw: Any) -> Any:
                    if not s.live:
                        return original(*a, **kw)
                    try:
                        with s.phase(name):
                            return original(*a, **kw)
                    except BaseException as e:
                        s.crashed(e)
                        raise

                return run

            return make

        def events(original: Any) -> Any:
            def call(*a: Any, **kw: Any) -> Any:
                try:
                    return original(*a, **kw)
                except BaseException as e:  # another callback raised: the run ends here
                    if s.live:
                        s.crashed(e)
                    raise

            return call

        p.wrap(trainer, "training_step", training_step)
        p.wrap(trainer, "get_batch_samples", batches)
        handler = getattr(trainer, "callback_handler", None)
        if handler is not None and hasattr(handler, "call_event"):
            p.wrap(handler, "call_event", events)
        p.wrap(trainer, "evaluate", phased("eval"))
        if hasattr(trainer, "_save_checkpoint"):
            p.wrap(trainer, "_save_checkpoint", phased("checkpoint"))

    @staticmethod
    def _fetched(s: Session, seconds: float, out: Any) -> None:
        s.mark(FORWARD)  # the step's batches are handed out
        s.add_wait(seconds)
        for batch in out[0]:
            s.step.add(None, batch)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._watch is not None:
            self._watch.stop()
        self._end()

    def _watch_train(self, trainer: Any) -> None:
        """Notice ``train()`` left without ``on_train_end`` (``trainwatch.py``)."""
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        frame = frame_of("train", trainer, sys._getframe()) if trainer is not None else None
        if frame is None:
            return
        self._watch = TrainWatch(threading.get_ident(), frame.f_code, self._left_train)

    def _left_train(self) -> None:
        """``train()`` is gone from the training thread's stack, ``on_train_end`` never
        came: an exception nothing wrapped ended it, and the caller caught it."""
        s = self._live()
        if s is None:
            return
        self._patches.undo()
        s.guard(
            "train left",
            lambda: s.probe.note(
                "Trainer.train() ended without on_train_end: an exception outside the "
                "adapter's view (the optimizer's step, the scheduler, a collator) ended "
                "training; its traceback is not in the log"
            ),
        )
        s.guard("close", lambda: s.probe.close("exception"))

    # --- steps and evaluation ----------------------------------------------------------
    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self._live()
        optimizer = kwargs.get("optimizer")
        if s is not None and optimizer is not None:
            s.guard("lr", lambda: s.lrs.take(optimizer))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self._live()
        if s is not None:
            s.guard("step", lambda: s.finish_step(max(int(state.global_step) - 1, 0)))

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self._live()
        metrics = kwargs.get("metrics")
        if s is None or not metrics:
            return
        s.guard("eval record", lambda: s.eval_record(_numbers(metrics)))
