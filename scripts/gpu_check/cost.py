"""cost: what logging each step costs the small GPT's training, four ways, in one run.

Per precision (GPU: fp32, bf16 autocast, fp16 + GradScaler; CPU: fp32 only), the same
training (:mod:`gpt`) with:

- ``none``: no logging at all;
- ``dltop``: ``Probe(model=, optimizer=)`` with its defaults (live socket, system
  sampler) and ``probe.step(loss=loss)``: loss, pre-clip grad norm (its hooks), lr,
  timings, memory;
- ``tensorboard``: ``SummaryWriter.add_scalar`` of the loss, the pre-clip norm and the lr
  every step (the tensors as such: TensorBoard reads them back itself);
- ``item``: ``loss.item()`` every step, kept in a list: the minimal logging loop.

Blocks of ``steps`` steps, alternated: each round runs every variant once, in an order
rotated by one each round, so that drift (clocks, heat, other tenants) falls on all of
them. Set-up, 3 warm-up steps and tear-down of each block are outside the timing, which
brackets the block with ``torch.cuda.synchronize()`` (the harness's own sync, not a
step's). Reported: each variant's median ms/step over the rounds and its overhead
against ``none`` of the same precision, with the spread of ``none``'s own blocks as the
noise to read the overheads against. Figures are printed, never asserted: the part
passes when every variant ran.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from dltop.probe import Probe

from scripts.gpu_check.common import Outcome, main, median
from scripts.gpu_check.gpt import Trainer, config_for, make_batches

VARIANTS = ("none", "dltop", "tensorboard", "item")
ROUNDS = {"cuda": 5, "cpu": 5}
STEPS = {"cuda": 50, "cpu": 10}
WARM = 3


class Logger:
    """One variant's set-up, per-step call and tear-down (set-up and tear-down untimed)."""

    def __init__(self, variant: str, trainer: Trainer, folder: Path) -> None:
        self.variant = variant
        self.trainer = trainer
        self.folder = folder
        self.probe: Any = None
        self.writer: Any = None
        self.kept: list[float] = []
        self.n = 0

    def start(self) -> Callable[[torch.Tensor, torch.Tensor], None]:
        t = self.trainer
        if self.variant == "dltop":
            self.probe = Probe(
                path=self.folder / "cost.jsonl",
                model=t.model,
                optimizer=t.opt,
                scaler=t.scaler,
                clip_norm=t.clip,
            ).start()
            step = self.probe.step

            def dltop(loss: torch.Tensor, norm: torch.Tensor) -> None:
                step(loss=loss)

            return dltop
        if self.variant == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.writer = w = SummaryWriter(str(self.folder / "tb"))

            def tensorboard(loss: torch.Tensor, norm: torch.Tensor) -> None:
                n = self.n
                w.add_scalar("train/loss", loss, n)
                w.add_scalar("train/grad_norm", norm, n)
                w.add_scalar("train/lr", t.opt.param_groups[0]["lr"], n)
                self.n = n + 1

            return tensorboard
        if self.variant == "item":

            def item(loss: torch.Tensor, norm: torch.Tensor) -> None:
                self.kept.append(loss.item())

            return item

        def none(loss: torch.Tensor, norm: torch.Tensor) -> None:
            pass

        return none

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.close()
        if self.writer is not None:
            self.writer.close()


def block(
    trainer: Trainer,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    variant: str,
    steps: int,
    folder: Path,
) -> float:
    """ms per step of one timed block of ``variant``."""
    cuda = trainer.device.type == "cuda"
    folder.mkdir(parents=True, exist_ok=True)
    logger = Logger(variant, trainer, folder)
    log = logger.start()
    try:
        for i in range(WARM):
            loss, norm = trainer.step(*batches[i % len(batches)])
            log(loss, norm)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            loss, norm = trainer.step(*batches[i % len(batches)])
            log(loss, norm)
        if cuda:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
    finally:
        logger.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return (t1 - t0) * 1000.0 / steps


def measure(
    device: torch.device, precision: str, rounds: int, steps: int, variants: tuple[str, ...]
) -> dict[str, Any]:
    cfg = config_for(device.type)
    trainer = Trainer(cfg, device, precision)
    batches = make_batches(cfg, device)
    for x, y in batches[:WARM]:
        trainer.step(x, y)
    times: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="gpu-check-cost-") as tmp:
        for r in range(rounds):
            k = r % len(variants)
            for v in variants[k:] + variants[:k]:
                times[v].append(block(trainer, batches, v, steps, Path(tmp) / f"{v}-{r}"))
    base = median(times["none"])
    out: dict[str, Any] = {"precision": precision, "rounds": rounds, "steps_per_block": steps}
    out["ms_per_step"] = {v: round(median(ts), 4) for v, ts in times.items()}
    out["blocks_ms"] = {v: [round(t, 4) for t in ts] for v, ts in times.items()}
    out["overhead_pct"] = {
        v: round((median(ts) / base - 1.0) * 100.0, 2) for v, ts in times.items() if v != "none"
    }
    spread = (max(times["none"]) - min(times["none"])) / base * 100.0 if base else 0.0
    out["none_spread_pct"] = round(spread, 2)
    return out


def body(args: argparse.Namespace) -> Outcome:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return "fail", "--device cuda but torch sees no CUDA device", {}
    if device.type == "cpu":
        torch.set_num_threads(1)  # a shared CPU: fewer threads, less noise
    variants: tuple[str, ...] = VARIANTS
    skipped: dict[str, str] = {}
    try:
        import tensorboard  # noqa: F401
    except Exception as e:
        variants = tuple(v for v in VARIANTS if v != "tensorboard")
        skipped["tensorboard"] = f"not installed ({type(e).__name__})"
    precisions = ("fp32", "bf16", "fp16") if device.type == "cuda" else ("fp32",)
    steps = args.steps or STEPS[device.type]
    results = [measure(device, p, ROUNDS[device.type], steps, variants) for p in precisions]
    details = {
        "config": vars(config_for(device.type)),
        "variants": list(variants),
        "skipped": skipped,
        "results": results,
        "note": "medians of alternated blocks; overheads within none_spread_pct are noise",
    }
    parts = []
    for r in results:
        o = r["overhead_pct"]
        figures = ", ".join(f"{v} {o[v]:+.1f}%" for v in variants if v != "none")
        parts.append(f"{r['precision']} {r['ms_per_step']['none']:.2f} ms/step: {figures}")
    summary = "; ".join(parts)
    if skipped:
        summary += " (" + ", ".join(f"{k} skipped: {v}" for k, v in skipped.items()) + ")"
    return "pass", summary, details


if __name__ == "__main__":
    sys.exit(main("cost", __doc__ or "", body))
