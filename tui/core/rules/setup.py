"""The run's set-up as the probe recorded it: ``config`` events (docs/log-format.md).

Why: troubleshooting checklists ask "does the DataLoader use workers?", "is clipping
on?", "is a GradScaler in use?", "did the batch size grow?". The probe writes these once
(and again when they change) in ``config`` events; this keeps the latest of each, read as
facts (``rules/run_facts.py``) so those questions get a yes or a no instead of "?".
Everything here comes from the log: only numbers, booleans and short names are kept.
"""

from __future__ import annotations

from typing import Any

from ....probe.schema import Record, as_float

MAX_NAME = 64  # characters of a class or dtype name kept


def _name(value: Any) -> str | None:
    return value[:MAX_NAME] if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


class Setup:
    """The latest known value of each set-up fact (``None``: the log does not say)."""

    __slots__ = (
        "num_workers", "pin_memory", "clip_max_norm", "amp_dtype",
        "loss_scaler", "param_dtype", "optimizer", "momentum", "weight_decay", "precision",
    )  # fmt: skip

    def __init__(self) -> None:
        self.num_workers: int | None = None
        self.pin_memory: bool | None = None
        # the max norm clipped at; 0.0 when the framework says clipping is off
        self.clip_max_norm: float | None = None
        self.amp_dtype: str | None = None
        self.loss_scaler: bool | None = None
        self.param_dtype: str | None = None
        self.optimizer: str | None = None
        self.momentum: float | None = None
        self.weight_decay: float | None = None
        self.precision: str | None = None

    def take(self, rec: Record) -> None:
        """One ``config`` event: what it says replaces what was known."""
        loader = rec.get("loader")
        if isinstance(loader, dict):
            self.num_workers = _int(loader.get("num_workers"))
            self.pin_memory = _bool(loader.get("pin_memory"))
        if "clip" in rec:
            clip = rec.get("clip")
            if isinstance(clip, dict):
                norm = as_float(clip.get("max_norm"))
                self.clip_max_norm = norm if norm is not None and norm >= 0 else None
            elif clip is None or clip is False:
                self.clip_max_norm = 0.0  # said to be off
        amp = rec.get("amp")
        if isinstance(amp, dict):
            # no autocast seen in the training forward: the run computes in float32
            self.amp_dtype = _name(amp.get("dtype")) or "float32"
            self.loss_scaler = _bool(amp.get("scaler"))
            self.param_dtype = _name(amp.get("param_dtype")) or self.param_dtype
        opt = rec.get("optimizer")
        if isinstance(opt, dict):
            self.optimizer = _name(opt.get("class"))
            groups = opt.get("groups")
            first = groups[0] if isinstance(groups, list) and groups else None
            if isinstance(first, dict):
                self.momentum = as_float(first.get("momentum"))
                betas = first.get("betas")
                if self.momentum is None and isinstance(betas, list) and betas:
                    self.momentum = as_float(betas[0])  # Adam's beta1 plays momentum's part
                self.weight_decay = as_float(first.get("weight_decay"))
        precision = _name(rec.get("precision"))
        if precision is not None:
            self.precision = precision
