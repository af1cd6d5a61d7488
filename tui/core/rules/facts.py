"""Facts: named numbers about a run that checklists use to mark their steps.

The rules engine keeps them up to date as records arrive; a checklist step names a
fact and a condition ("lr_last > 0.1") and is marked yes/no with the fact's value
and step as its evidence. Keeping the vocabulary in one place lets checklist data
files refer to facts by name without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..text.fmt import number


@dataclass(frozen=True)
class Fact:
    """A value the log itself answers, with the step it was seen at and how to say it."""

    name: str
    value: Any
    step: int | None = None
    text: str = ""  # e.g. "lr = 3.0 at step 120"; built by the engine

    def describe(self) -> str:
        if self.text:
            return self.text
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{self.name} = {number(self.value)}{at}"


# The vocabulary. The engine must provide every name here (value None when the log
# cannot tell); checklist files may use only these names (a test checks both).
FACT_NAMES: dict[str, str] = {
    "steps": "number of step records seen",
    "last_step": "the latest step number",
    "lr_initial": "learning rate at the first step",
    "lr_last": "learning rate at the latest step",
    "lr_max": "largest learning rate seen",
    # the first non-finite value of either kind (an AMP overflow counts); a nan_loss or
    # nan_grad alert carries its own episode's lr and grad_norm_before(_ratio) as evidence
    "lr_at_first_nonfinite": "learning rate at the first NaN/Inf loss or grad norm",
    "first_nonfinite_step": "first step with a NaN/Inf loss or grad norm",
    "grad_norm_median": "median grad norm over the recent window (finite values)",
    "grad_norm_max": "largest finite grad norm seen",
    "grad_norm_before_nonfinite": "largest finite grad norm of the ~20 steps up to the first NaN/Inf",
    "grad_norm_before_nonfinite_ratio": "that norm / the median of the grad norms before those steps",
    "grad_norm_min_recent": "smallest grad norm in the recent window",
    "loss_first": "median loss over the first window",
    "loss_last": "median loss over the latest window",
    "loss_min": "lowest finite loss seen",
    "loss_rel_improvement": "(loss_first - loss_last) / |loss_first|",
    "loss_max_jump_ratio": "largest loss / rolling median ratio seen",
    "data_wait_share": "median data_time / step_time over the last 50 steps",
    "step_time_median": "median step time, seconds",
    "step_time_p95": "95th percentile step time, seconds",
    "gpu_util_median": "median NVML GPU utilization %, recent window",
    "mem_start": "memory (allocated on CUDA, RSS on CPU) early in the run, bytes",
    "mem_last": "latest memory, bytes",
    "mem_growth": "mem_last - mem_start, bytes",
    "mem_growth_per_step": "least-squares memory slope, bytes per step",
    "mem_limit": "device or process memory limit, bytes",
    "batch_size": "batch size when the probe knows it",
    "eval_loss_best": "lowest eval loss",
    "eval_loss_best_step": "step of the lowest eval loss",
    "eval_loss_last": "latest eval loss",
    "eval_train_gap": "latest eval loss - train loss at that step",
    "evals": "number of eval records",
    "zero_grad_fraction_max": "largest per-layer fraction of exactly-zero gradient elements",
    "first_last_grad_ratio": "first layer grad norm / last layer grad norm (latest layers record)",
    "layers_without_grad": "trainable layers whose grad norm is exactly 0",
    "seconds_since_last_step": "seconds between the latest step and the latest record",
    "device": "'cuda' or 'cpu' from meta",
    # the run's set-up, from the probe's config events (rules/setup.py)
    "loader_num_workers": "the DataLoader's num_workers (0: loaded in the training process)",
    "loader_pin_memory": "whether the DataLoader pins memory for asynchronous GPU copies",
    "batch_size_first": "the batch size of the first steps that had one",
    "batch_size_max": "the largest batch size logged",
    "clip_max_norm": "the max norm gradients are clipped at (0: clipping off)",
    "amp_dtype": "the autocast dtype seen in forward ('float16', 'bfloat16')",
    "loss_scaler": "whether an AMP GradScaler is in use",
    "optimizer": "the optimizer's class ('SGD', 'AdamW')",
    "momentum": "the optimizer's momentum (Adam: beta1)",
    "weight_decay": "the optimizer's weight decay",
}
