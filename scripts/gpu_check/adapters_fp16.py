"""adapters: Lightning ``precision="16-mixed"`` and HF ``fp16=True`` with ``DltopCallback``.

Both frameworks keep their own ``GradScaler`` and hand the probe nothing but the
callback; the adapters find the scaler (Lightning's precision plugin, the Trainer's
Accelerate) so that the probe's norm is that of the unscaled gradient. Each run trains a
small causal LM (Lightning: :mod:`gpt`'s GPT; HF: a 2-layer GPT-2 from a config, no
download) on random tokens, clipping at 0.1, and takes a reference in the same run:

- Lightning: ``torch.nn.utils.get_total_norm`` of the gradients in
  ``on_before_optimizer_step`` (after Lightning's unscale, before its clipping);
- HF: what ``Trainer._clip_grad_norm`` returns (Accelerate unscales, then torch's
  ``clip_grad_norm_`` gives the pre-clip norm); with a Trainer older than 5.0, which clips
  inline, the ``grad_norm`` it logs at ``logging_steps=1`` (the same value, read back).

Passes when every step's ``grad_norm`` in the log equals the reference (rel. 1e-4; an
overflow step, which the scaler skips: both non-finite), the references were clipped
(> 0.1: the probe read before the clip), the ``config`` event says the precision and a
scaler, and steps carry ``loss_scale``. On the CPU: ``bf16-mixed`` / ``bf16=True`` (the CPU
has no fp16 GradScaler recipe; the Trainer refuses ``fp16`` there), no scaler.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from dltop.probe.decoding import read_records
from dltop.probe.schema import as_float

from scripts.gpu_check.common import Outcome, main, rel_err
from scripts.gpu_check.gpt import GPT, GPTConfig

CLIP = 0.1
STEPS = {"cuda": 30, "cpu": 8}
REL_TOL = 1e-4
LM_CONFIG = GPTConfig(vocab=256, seq=32, d=64, heads=2, layers=2, batch=8)


def _tokens(n: int, vocab: int, seq: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, seq + 1), generator=g)


def _compare(log: Path, refs: list[float], precision: str, scaler: bool) -> dict[str, Any]:
    recs, _ = read_records(str(log))
    steps = [r for r in recs if r.get("kind") == "step"]
    norms = [as_float(s.get("grad_norm")) for s in steps]
    errs = [rel_err(n, r) if n is not None else math.inf for n, r in zip(norms, refs, strict=False)]
    configs = [r for r in recs if r.get("type") == "config"]
    config = configs[-1] if configs else {}
    warnings_ = [str(r.get("message"))[:200] for r in recs if r.get("type") == "warning"]
    finite = [r for r in refs if math.isfinite(r)]
    out: dict[str, Any] = {
        "steps_logged": len(steps),
        "references": len(refs),
        "overflow_steps": len(refs) - len(finite),
        "grad_norm_max_rel_err": max(errs) if errs else None,
        "ref_norm_min": min(finite) if finite else None,
        "ref_norm_max": max(finite) if finite else None,
        "config_precision": config.get("precision"),
        "config_amp": config.get("amp"),
        "loss_scale_steps": sum(1 for s in steps if "loss_scale" in s),
        "log_warnings": warnings_[:3],
    }
    why = []
    if not steps or len(steps) != len(refs):
        why.append(f"{len(steps)} steps logged, {len(refs)} references")
    if errs and max(errs) > REL_TOL:
        why.append(f"grad norm off the reference by {max(errs):.2g} (rel)")
    if finite and min(finite) <= CLIP:
        why.append(f"a reference norm {min(finite):.3g} <= the clip {CLIP}: no proof of pre-clip")
    if config.get("precision") != precision:
        why.append(f"config precision {config.get('precision')!r}, not {precision!r}")
    amp = config.get("amp")
    if (amp.get("scaler") if isinstance(amp, dict) else None) is not scaler:
        why.append(f"config amp {config.get('amp')!r}: scaler should be {scaler}")
    if scaler and out["loss_scale_steps"] != len(steps):
        why.append(f"loss_scale on {out['loss_scale_steps']} of {len(steps)} steps")
    if warnings_:
        why.append(f"probe warnings: {warnings_[0]}")
    out["ok"] = not why
    out["why"] = why
    return out


def run_lightning(device: str, steps: int, work: Path) -> dict[str, Any]:
    import lightning.pytorch as pl
    from dltop.probe.lightning import DltopCallback
    from torch.utils.data import DataLoader, TensorDataset

    cfg = LM_CONFIG
    precision = "16-mixed" if device == "cuda" else "bf16-mixed"

    class LM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.gpt = GPT(cfg)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            (tokens,) = batch
            logits = self.gpt(tokens[:, :-1])
            return torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, cfg.vocab), tokens[:, 1:].reshape(-1)
            )

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    refs: list[torch.Tensor] = []

    class Reference(pl.Callback):
        def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            refs.append(torch.nn.utils.get_total_norm(grads).detach().clone())

    log = work / "lightning.jsonl"
    log.unlink(missing_ok=True)
    trainer = pl.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=steps,
        gradient_clip_val=CLIP,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(work),
        callbacks=[Reference(), DltopCallback(path=log, socket=False)],
    )
    data = DataLoader(
        TensorDataset(_tokens(cfg.batch * steps, cfg.vocab, cfg.seq)), batch_size=cfg.batch
    )
    trainer.fit(LM(), data)
    values = [float(r) for r in refs]
    return {"precision": precision} | _compare(log, values, precision, device == "cuda")


def run_hf(device: str, steps: int, work: Path) -> dict[str, Any]:
    import transformers
    from dltop.probe.hf import DltopCallback

    transformers.logging.set_verbosity_error()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    refs: list[torch.Tensor] = []
    logged: list[float] = []

    class RefTrainer(transformers.Trainer):
        def _clip_grad_norm(self, model: Any) -> Any:  # transformers >= 5
            norm = super()._clip_grad_norm(model)  # pre-clip, unscaled (Accelerate)
            refs.append(torch.as_tensor(norm).detach().clone())
            return norm

    class Logged(transformers.TrainerCallback):
        """The Trainer's own logged ``grad_norm`` (the same pre-clip norm, read back by the
        Trainer at ``logging_steps=1``): the reference where ``_clip_grad_norm`` is absent."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **k: Any) -> None:
            if logs and "grad_norm" in logs and "loss" in logs:
                logged.append(float(logs["grad_norm"]))

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg)
    tokens = _tokens(8 * steps, 256, 31, seed=1)
    data = [{"input_ids": t, "labels": t.clone()} for t in tokens]
    fp16 = device == "cuda"
    args = transformers.TrainingArguments(
        output_dir=str(work / "hf-out"),
        per_device_train_batch_size=8,
        max_steps=steps,
        max_grad_norm=CLIP,
        learning_rate=1e-3,
        fp16=fp16,
        bf16=not fp16,
        use_cpu=not fp16,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    log = work / "hf.jsonl"
    log.unlink(missing_ok=True)
    trainer = RefTrainer(
        model=model,
        args=args,
        train_dataset=data,
        callbacks=[Logged(), DltopCallback(path=log, socket=False)],
    )
    trainer.train()
    values = [float(r) for r in refs]
    source = "Trainer._clip_grad_norm"
    if not values:  # an older Trainer clips inline
        values, source = logged, "the Trainer's logged grad_norm"
    precision = "fp16" if fp16 else "bf16"
    return {"precision": precision, "reference": source} | _compare(log, values, precision, fp16)


def body(args: argparse.Namespace) -> Outcome:
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        return "fail", "--device cuda but torch sees no CUDA device", {}
    if device == "cpu":
        torch.set_num_threads(1)  # a shared CPU: fewer threads, less noise
    steps = args.steps or STEPS[device]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-adapters-") as tmp:
        for name, module, run in (
            ("lightning", "lightning", run_lightning),
            ("hf", "transformers", run_hf),
        ):
            try:
                __import__(module)
            except Exception as e:
                results[name] = {"skipped": f"{module} not importable: {type(e).__name__}: {e}"}
                continue
            try:
                results[name] = run(device, steps, Path(tmp))
            except Exception as e:
                results[name] = {"ok": False, "why": [f"crashed: {type(e).__name__}: {e}"[:300]]}
    ran = {k: v for k, v in results.items() if "skipped" not in v}
    parts = []
    for name, r in results.items():
        if "skipped" in r:
            parts.append(f"{name} skipped ({r['skipped'][:80]})")
        elif r.get("ok"):
            parts.append(
                f"{name} {r['precision']}: {r['steps_logged']} steps, grad norm = reference "
                f"(max rel {r['grad_norm_max_rel_err']:.1e}, {r['overflow_steps']} overflow)"
            )
        else:
            parts.append(f"{name}: {'; '.join(r.get('why', []))}")
    summary = "; ".join(parts)
    if not ran:
        return "skip", summary, results
    if any(not r.get("ok") for r in ran.values()):
        return "fail", summary, results
    return "pass", summary, results


if __name__ == "__main__":
    sys.exit(main("adapters", __doc__ or "", body))
