"""PyTorch Lightning in one line: ``Trainer(callbacks=[DltopCallback(path=...)])``.

Why a callback and not a ``Logger``: Lightning's loggers run on rank 0 only and every
``log_every_n_steps`` (50) steps, and see only what the module chose to ``self.log``; the
probe wants every optimizer step of every rank, the gradient before clipping and the
time the loop waits for data. So the adapter is a ``Callback`` that builds a ``Probe`` at
the start of the sanity check or of training, whichever comes first (after the strategy
set up the model, optimizers and process group, and after Lightning's signal connector
took its copy of the signal handlers: see ``_begin``) and closes it at the end of ``fit``. Where each field comes from, and why there:

- loss: ``outputs["loss"]`` of ``on_train_batch_end``, which Lightning has already divided
  by ``accumulate_grad_batches``; the step's loss is the mean of its micro-batches' losses
  as ``training_step`` returned them (the division undone), summed on the device, no sync.
- grad norm: the probe's own end-of-backward hooks on the module's parameters (the whole
  accumulated gradient, after DDP's all-reduce, unscaled with the AMP ``GradScaler`` of
  ``16-mixed``), i.e. before Lightning's ``gradient_clip_val`` clipping.
  ``on_before_optimizer_step`` would also see it unscaled and unclipped, but reading
  ``.grad`` there costs a pass the hooks already made.
- lr: copied in ``on_before_optimizer_step``, once per optimizer step: Lightning steps
  ``interval="step"`` schedulers before ``on_train_batch_end``.
- data wait: the time inside Lightning's own fetch of each training batch, the span the
  training epoch loop brackets for its profiler (``train_dataloader_next``; those two
  callables are wrapped during ``fit``), summed over the micro-batches of a step.
- phases: validation (``eval``, sanity check included) and ``trainer.save_checkpoint``
  (``checkpoint``, wrapped during ``fit``) are declared, so neither reads as a stall.
- eval records: the metrics logged during validation (``val_loss`` recorded as ``loss``).
- crashes: ``on_exception`` records the exception like ``with Probe(...)`` does.
- config: the optimizer's param groups (its step hooked for the heartbeats' ``where``),
  ``trainer.precision`` and ``gradient_clip_val`` go in the ``config`` event.
- ranks: one log per rank; the default folder is rank 0's, posted in the process group's
  key-value store for the others (no collective: see ``rankpath.shared_job``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from .adapter import (
    CallbackBase,
    Session,
    framework_note,
    missing_framework,
    open_session,
)
from .runconfig import clip_section

try:
    import lightning.pytorch as pl
    import torch
except ImportError as _e:  # only the missing package itself gets the short message
    raise missing_framework(
        _e,
        ("lightning", "torch"),
        "dltop.probe.lightning needs PyTorch Lightning (the `lightning` package): "
        "pip install 'dltop-monitor[lightning]'",
    ) from None

__all__ = ["DltopCallback"]


def _clip(trainer: pl.Trainer) -> dict[str, Any] | None:
    """The ``config`` event's ``clip`` from ``gradient_clip_val``: ``{"max_norm",
    "norm_type"}`` (Lightning clips the 2-norm), ``{"max_value"}`` for value clipping,
    ``None`` when the trainer does not clip."""
    val = trainer.gradient_clip_val
    if val is None or isinstance(val, bool) or not isinstance(val, int | float) or val <= 0:
        return None
    if str(trainer.gradient_clip_algorithm) in ("value", "GradClipAlgorithmType.VALUE"):
        return {"max_value": float(val)}
    return clip_section(val)


class DltopCallback(CallbackBase, pl.Callback):
    """Records a Lightning ``fit`` with the probe; keyword arguments are ``Probe``'s
    (``path``, ``socket``, ``layers_every``...), the model and optimizer come from the
    trainer. Never raises into training: the probe reports its own failures once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kwargs)  # trainer.save_checkpoint and the fetch wrapped during fit
        self._before_eval: dict[str, Any] = {}
        self._started = False  # this fit's probe was built (or failed to build)

    # --- start and end -------------------------------------------------------------------
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = False  # a new fit: a new probe at its sanity check or training

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._begin(trainer, pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._begin(trainer, pl_module)

    def _begin(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Build the probe at the first of the sanity check and the training, not at
        ``on_fit_start``: Lightning's signal connector captures the signal handlers in
        between and puts them back after the fit, so a probe started before it left its
        handler installed after the fit (a closed probe's, passing the signal through)."""
        if self._started:
            return
        self._started = True
        try:
            self._start(trainer, pl_module)
        except Exception as e:  # no probe for this fit; the training goes on
            sys.stderr.write(f"dltop: warning: no probe for this fit ({type(e).__name__}: {e})\n")
            self._end()
            self._session = None

    def _start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        s = self._session = open_session(
            self._kwargs,
            trainer.global_rank,
            trainer.world_size,
            pl_module,
            getattr(trainer.precision_plugin, "scaler", None),
            trainer.optimizers[0] if trainer.optimizers else None,
            {"precision": str(trainer.precision), "clip": _clip(trainer)},
        )
        self._wrap_save(trainer, s)
        self._wrap_fetch(trainer, s)
        framework_note(
            s,
            "lightning",
            pl.__version__,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
            gradient_clip_val=trainer.gradient_clip_val,
            precision=str(trainer.precision),
            world_size=trainer.world_size,
        )

    def _wrap_save(self, trainer: pl.Trainer, s: Session) -> None:
        """``trainer.save_checkpoint`` inside a ``checkpoint`` phase (``ModelCheckpoint``
        and users call it through the trainer; Lightning has no hook after the write)."""

        def make(original: Any) -> Any:
            def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
                if not s.live:
                    return original(*args, **kwargs)
                with s.phase("checkpoint"):
                    return original(*args, **kwargs)

            return save_checkpoint

        self._patches.wrap(trainer, "save_checkpoint", make)

    def _wrap_fetch(self, trainer: pl.Trainer, s: Session) -> None:
        """Time Lightning's fetch of each training batch: the training epoch loop hands its
        fetcher two callables that bracket every ``next()`` (for its profiler, in every
        supported Lightning); wrapping those costs two calls a batch."""
        loop = trainer.fit_loop.epoch_loop
        if not (hasattr(loop, "_on_before_fetch") and hasattr(loop, "_on_after_fetch")):
            return  # an older Lightning than the supported 2.4: steps without data_time

        def around(original: Any, begins: bool) -> Any:
            mark = s.wait_begins if begins else s.wait_ends

            def call(*args: Any, **kwargs: Any) -> Any:
                if s.live:
                    s.guard("data wait", mark)
                return original(*args, **kwargs)

            return call

        self._patches.wrap(loop, "_on_before_fetch", lambda o: around(o, True))
        self._patches.wrap(loop, "_on_after_fetch", lambda o: around(o, False))

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._end()  # also after an exception (closed already) or a fit stopped early

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        s = self._live()
        if s is not None:
            s.crashed(exception)
        self._patches.undo()

    # --- the training loop -------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        s = self._live()
        if s is not None:
            s.guard("batch start", s.batch_ready)

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        s = self._live()
        if s is None:
            return
        s.step.stepped = True
        opts = trainer.optimizers
        if not opts or optimizer is opts[0] or len(opts) == 1:
            s.guard("lr", lambda: s.lrs.take(optimizer))

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        s = self._live()
        if s is None:
            return
        s.guard("batch end", lambda: self._batch_end(trainer, pl_module, s, outputs, batch))

    def _batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        s: Session,
        outputs: Any,
        batch: Any,
    ) -> None:
        loss = outputs
        if not isinstance(loss, torch.Tensor):  # automatic optimisation gives a dict
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            if not isinstance(loss, torch.Tensor | float | int):
                loss = None
        s.step.add(loss, batch)
        if not s.step.stepped:
            return  # an accumulation micro-batch: the step goes on
        n = s.step.micro
        # automatic optimisation divided each loss by accumulate_grad_batches; the step's
        # loss is the mean over its micro-batches of what training_step returned
        k = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
        factor = k / n if n else 1.0
        s.finish_step(max(trainer.global_step - 1, 0), factor)

    # --- validation ------------------------------------------------------------------
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        s = self._live()
        if s is None:
            return
        s.guard("validation start", lambda: s.begin_phase("eval"))
        self._before_eval = dict(trainer.callback_metrics)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        s = self._live()
        if s is None:
            return
        if not trainer.sanity_checking:
            s.guard("eval record", lambda: self._eval_record(trainer, s))
        s.guard("validation end", s.end_phase)

    def _eval_record(self, trainer: pl.Trainer, s: Session) -> None:
        """The metrics the validation logged: those new or changed since it began."""
        before = self._before_eval
        self._before_eval = {}
        # a value that is the very object it was before: a training metric, untouched
        s.eval_record((k, v) for k, v in trainer.callback_metrics.items() if before.get(k) is not v)
