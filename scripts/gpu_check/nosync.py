"""no sync: a small GPT trains with the probe and the probe never makes the host wait.

Per precision (GPU: fp32, bf16 autocast, fp16 + GradScaler; CPU: fp32, bf16), 200 steps
(CPU: 8) of :mod:`gpt`'s training with ``probe.step(loss=loss)`` and the probe's own
pre-clip grad norm (its backward hooks), the whole probe lifetime (start, steps, close)
under :class:`SyncWatch`. Passes when:

- the probe made no sync (GPU: torch's sync debug mode; CPU: no host read of a tensor
  outside its two ``device.type == "cpu"`` branches);
- the script's own deliberate ``loss.item()`` every 50 steps (CPU: 4) was seen, every
  time, and reported as the user's (with any other sync of the training's own:
  ``GradScaler.step`` reads ``found_inf``);
- every step is in the log with its grad norm, equal to ``clip_grad_norm_``'s pre-clip
  norm of the same step (rel. 1e-4; an fp16 overflow step: both non-finite), and the
  log holds no probe warning;
- a self-test with syncs planted in the probe (:mod:`inject`: one in the step path, one
  in the backward hooks, per step) sees every one of them as the probe's: the watch is
  not blind.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import torch
from dltop.probe import Probe
from dltop.probe.decoding import read_records
from dltop.probe.schema import as_float

from scripts.gpu_check.common import Outcome, main, rel_err
from scripts.gpu_check.gpt import Trainer, config_for, make_batches, precisions_for
from scripts.gpu_check.inject import planted_syncs
from scripts.gpu_check.syncwatch import SyncWatch

STEPS = {"cuda": 200, "cpu": 8}
USER_SYNC_EVERY = {"cuda": 50, "cpu": 4}
SELFTEST_STEPS = 5
REL_TOL = 1e-4


def _users_own_sync(loss: torch.Tensor) -> float:
    """The training's own ``.item()``, on purpose: the watch must see it as the user's."""
    return loss.item()


def train(
    device: torch.device, precision: str, steps: int, log: Path, user_sync_every: int = 0
) -> tuple[SyncWatch, list[float], list[dict[str, Any]]]:
    """Train under the watch; the watch, the reference norms and the log's records."""
    cfg = config_for(device.type)
    trainer = Trainer(cfg, device, precision)
    batches = make_batches(cfg, device)
    for x, y in batches[:2]:  # warm-up outside the watch: cuBLAS/cuDNN set-up, lazy inits
        trainer.step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize()
    refs: list[torch.Tensor] = []
    log.unlink(missing_ok=True)
    with (
        SyncWatch(device.type) as watch,
        Probe(
            path=log,
            model=trainer.model,
            optimizer=trainer.opt,
            scaler=trainer.scaler,
            clip_norm=trainer.clip,
            socket=False,
        ) as probe,
    ):
        for i in range(steps):
            x, y = batches[i % len(batches)]
            loss, norm = trainer.step(x, y)
            refs.append(norm)
            probe.step(loss=loss)
            if user_sync_every and (i + 1) % user_sync_every == 0:
                _users_own_sync(loss)
    ref_values = torch.stack(refs).float().cpu().tolist() if refs else []
    recs, _ = read_records(str(log))
    return watch, ref_values, recs


def check_run(
    precision: str,
    steps: int,
    watch: SyncWatch,
    refs: list[float],
    recs: list[dict[str, Any]],
    expected_user: int,
) -> dict[str, Any]:
    """One precision's findings, with ``ok`` and the reasons it is not."""
    step_recs = [r for r in recs if r.get("kind") == "step"]
    norms = [as_float(r.get("grad_norm")) for r in step_recs]
    errs = [
        rel_err(n, ref) if n is not None else math.inf for n, ref in zip(norms, refs, strict=False)
    ]
    warnings_ = [str(r.get("message")) for r in recs if r.get("type") == "warning"]
    deliberate = watch.count_at("_users_own_sync")
    nonfinite = sum(1 for r in refs if not math.isfinite(r))
    out: dict[str, Any] = {
        "precision": precision,
        "steps": steps,
        "steps_logged": len(step_recs),
        "grad_norms_logged": sum(1 for n in norms if n is not None),
        "grad_norm_max_rel_err": max(errs) if errs else None,
        "overflow_steps": nonfinite,
        "log_warnings": warnings_[:5],
        "deliberate_user_syncs": deliberate,
        "expected_user_syncs": expected_user,
        **watch.summary(),
    }
    why = []
    if out["probe_syncs"]:
        why.append(f"{out['probe_syncs']} probe syncs")
    if deliberate != expected_user:
        why.append(f"the watch saw {deliberate} of the script's {expected_user} own syncs")
    if len(step_recs) != steps or out["grad_norms_logged"] != steps:
        why.append(f"{len(step_recs)} steps, {out['grad_norms_logged']} grad norms of {steps}")
    if errs and max(errs) > REL_TOL:
        why.append(f"grad norm off the reference by {max(errs):.2g} (rel)")
    if warnings_:
        why.append(f"probe warnings in the log: {warnings_[0][:120]}")
    out["ok"] = not why
    out["why"] = why
    return out


def selftest(device: torch.device, work: Path) -> dict[str, Any]:
    """Planted syncs (step path and hooks, each step) must all be seen as the probe's."""
    with planted_syncs() as planted:
        watch, _, _ = train(device, "fp32", SELFTEST_STEPS, work / "nosync-selftest.jsonl")
    caught = len(watch.probe_syncs())
    return {
        "planted": planted.count,
        "planted_step_path": len(planted.step),
        "planted_hooks": len(planted.hook),
        "caught_as_probe": caught,
        "sites": watch.summary()["probe_sync_sites"],
        "ok": planted.count >= 2 * SELFTEST_STEPS and caught >= planted.count,
    }


def body(args: argparse.Namespace) -> Outcome:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return "fail", "--device cuda but torch sees no CUDA device", {}
    if device.type == "cpu":
        torch.set_num_threads(1)  # a shared CPU: fewer threads, less noise
    steps = args.steps or STEPS[device.type]
    every = USER_SYNC_EVERY[device.type]
    runs = []
    for precision in precisions_for(device.type):
        log = args.out / f"nosync-{precision}.jsonl"
        watch, refs, recs = train(device, precision, steps, log, every)
        runs.append(check_run(precision, steps, watch, refs, recs, steps // every))
    test = selftest(device, args.out)
    details = {
        "mode": (
            "torch.cuda.set_sync_debug_mode('warn'), every thread"
            if device.type == "cuda"
            else "CPU: host reads of tensors intercepted on the training thread"
        ),
        "config": vars(config_for(device.type)),
        "runs": runs,
        "selftest": test,
    }
    total = sum(r["steps"] for r in runs)
    probe = sum(r["probe_syncs"] for r in runs)
    user = sum(r["user_syncs"] for r in runs)
    names = ", ".join(r["precision"] for r in runs)
    bad = [f"{r['precision']}: {'; '.join(r['why'])}" for r in runs if not r["ok"]]
    if not test["ok"]:
        bad.append(f"self-test: {test['caught_as_probe']} of {test['planted']} planted syncs seen")
    kind = "syncs" if device.type == "cuda" else "host reads"
    summary = (
        f"{probe} probe {kind} in {total} steps ({names}); {user} of the training's own "
        f"reported apart; self-test caught {test['caught_as_probe']}/{test['planted']} planted"
    )
    if bad:
        return "fail", summary + " | " + " | ".join(bad), details
    return "pass", summary, details


if __name__ == "__main__":
    sys.exit(main("nosync", __doc__ or "", body))
