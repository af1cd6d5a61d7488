"""The one training entry point of the fault suite.

    python -m tests.faults.train SCENARIO --seed N --out runs/x.jsonl
    python -m tests.faults.train SCENARIO --seed N --raw --print-every 20   # no probe

It is a plain PyTorch loop instrumented exactly like a user would (the contract's
three lines around the loop). The fault lives in the scenario (data, model, optimiser
settings, or one of three loop bugs), so this file reads like any small training.

Next to the log it writes ``<out>.label.json``: the scenario's labels plus the onsets
that are only known while training (first non-finite loss, best held-out loss, the
step that crashed, the step where RSS had grown 256 MiB), measured from the
training's own numbers, never from the diagnosis. ``--raw`` runs without the probe
and prints loss / grad-norm / lr / data-wait per step: how the suite checks that a
fault produces its intended symptom independently of dltop.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python tests/faults/train.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch import nn

from tests.faults import scenarios as sc_mod
from tests.faults.data import Task, eval_batches, make_loader, make_task
from tests.faults.models import build_model

RSS_ONSET_BYTES = 256 * 2**20  # the graph_leak onset: RSS grown this much


def make_optimizer(sc: sc_mod.Scenario, model: nn.Module) -> torch.optim.Optimizer:
    params = model.parameters()
    if sc.optimizer == "sgd":
        return torch.optim.SGD(params, lr=sc.lr, momentum=sc.momentum, weight_decay=sc.weight_decay)
    if sc.optimizer == "adam":
        return torch.optim.Adam(params, lr=sc.lr, weight_decay=sc.weight_decay)
    if sc.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=sc.lr, weight_decay=sc.weight_decay)
    raise ValueError(f"unknown optimizer {sc.optimizer!r}")


def make_schedule(sc: sc_mod.Scenario, opt: torch.optim.Optimizer) -> Any:
    o, n = sc.schedule_opts, sc.steps
    if sc.schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    if sc.schedule == "step":
        return torch.optim.lr_scheduler.StepLR(opt, int(o["every"]), gamma=o["gamma"])
    if sc.schedule == "jump":  # a StepLR whose gamma has a typo
        return torch.optim.lr_scheduler.StepLR(opt, int(o["at"]), gamma=o["gamma"])
    if sc.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=n)
    if sc.schedule == "warmup_cosine":
        w = int(o["warmup"])

        def factor(s: int) -> float:
            if s < w:
                return (s + 1) / w
            return 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, n - w)))

        return torch.optim.lr_scheduler.LambdaLR(opt, factor)
    if sc.schedule == "sgdr":  # cosine with warm restarts: lr back to the top every T_0 steps
        return torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=int(o["T_0"]))
    if sc.schedule == "cyclic":  # triangular, between base_lr and sc.lr
        return torch.optim.lr_scheduler.CyclicLR(
            opt, base_lr=o["base_lr"], max_lr=sc.lr, step_size_up=int(o["up"])
        )
    raise ValueError(f"unknown schedule {sc.schedule!r}")


class Reinforce(nn.Module):
    """A REINFORCE loss on a contextual bandit built from a classification task.

    The policy samples one class per input and gets reward 1 when it is the label;
    the loss is ``-(reward - baseline) * log p(action)`` with a running-mean baseline,
    so it is noisy, centred near 0 (often negative) and does not trend down the way a
    supervised loss does, even while the mean reward climbs.
    """

    def __init__(self, momentum: float = 0.9) -> None:
        super().__init__()
        self.momentum = momentum
        self.baseline = 0.0

    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        dist = torch.distributions.Categorical(logits=logits)
        action = dist.sample()
        reward = (action == y).float()
        advantage = reward - self.baseline
        self.baseline = self.momentum * self.baseline + (1 - self.momentum) * reward.mean().item()
        return -(advantage * dist.log_prob(action)).mean()


def make_criterion(sc: sc_mod.Scenario, task: Task) -> nn.Module:
    if sc.objective == "reinforce":
        return Reinforce()
    if task.loss == "mse":
        return nn.MSELoss()
    return nn.CrossEntropyLoss(label_smoothing=sc.label_smoothing)


def pretrain(sc: sc_mod.Scenario, model: nn.Module, task: Task, seed: int) -> None:
    """``sc.pretrain_steps`` of Adam (lr 3e-3) before the probe starts: the checkpoint
    a fine-tune starts from. Nothing of it is logged."""
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = make_criterion(sc, task)
    loader, _ = make_loader(task.train, sc.batch_size, sc.pretrain_steps, seed + 100)
    for x, y in loader:
        criterion(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def growing_batches(task: Task, start: int, every: int, steps: int, seed: int) -> Iterator[Any]:
    """A batch-size ramp: ``start`` samples, doubling every ``every`` steps."""
    g = torch.Generator().manual_seed(seed)
    d, k = task.shape["d_in"], task.shape["n_out"]
    for step in range(steps):
        bs = start * 2 ** (step // every)
        yield torch.randn(bs, d, generator=g), torch.randint(0, k, (bs,), generator=g)


def cap_address_space(headroom_mib: int) -> None:
    """Limit this process's address space to what it maps now plus ``headroom_mib``.

    RLIMIT_AS makes the real CPU allocator fail ("can't allocate memory") long before
    the machine runs short, whatever else runs on it.
    """
    with open("/proc/self/status") as f:
        vm_kib = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    cap = vm_kib * 1024 + headroom_mib * 2**20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def evaluate(model: nn.Module, batches: list[Any], criterion: nn.Module) -> float:
    with torch.no_grad():
        total = sum(criterion(model(x), y).item() * len(x) for x, y in batches)
    return total / sum(len(x) for x, _ in batches)


class RawProbe:
    """Stands in for the Probe under ``--raw``: prints what the training really does.

    The grad norm is computed here from ``.grad`` (before any clipping, like the
    probe's), the data wait is the time blocked in the loader's ``next()``.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, every: int) -> None:
        self.model, self.optimizer, self.every = model, optimizer, every
        self.n = 0
        self.data_time = 0.0
        self._sq = 0.0  # sum of squared grad elements seen by this backward
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._on_grad)

    def _on_grad(self, p: torch.Tensor) -> None:
        assert p.grad is not None
        self._sq += float(p.grad.detach().pow(2).sum())

    def __enter__(self) -> RawProbe:
        print(f"{'step':>5} {'loss':>11} {'grad_norm':>11} {'lr':>9} {'data%':>6}")
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def loader(self, it: Any) -> Iterator[Any]:
        it = iter(it)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.data_time = time.perf_counter() - t0
            self._t_batch = time.perf_counter()
            yield batch

    def step(self, loss: Any, grad_norm: Any = None) -> None:
        if self.n % self.every == 0:
            norm = grad_norm if grad_norm is not None else math.sqrt(self._sq)
            compute = time.perf_counter() - self._t_batch
            share = self.data_time / max(1e-9, self.data_time + compute)
            lr = self.optimizer.param_groups[0]["lr"]
            print(
                f"{self.n:5d} {loss.item():11.4g} {float(norm):11.4g} {lr:9.3g} {100 * share:5.1f}%"
            )
        self.n += 1
        self._sq = 0.0

    def eval(self, loss: float) -> None:
        print(f"{'eval':>5} {loss:11.4g}")


class Watch:
    """The onsets only known while training, measured from the training's own numbers.

    Written next to the log as ``<out>.label.json`` together with the scenario's labels;
    the harness scores the diagnosis against it. Never reads the probe's output.
    """

    def __init__(self, sc: sc_mod.Scenario, seed: int) -> None:
        self.sc = sc
        self.label: dict[str, Any] = {
            "scenario": sc.name,
            "seed": seed,
            "expected": sorted(sc.expected),
            "onset_kind": sc.onset if isinstance(sc.onset, str) else "fixed",
            "budget": sc.budget,
            "steps_planned": sc.steps,
        }
        self.measured: dict[str, int | None] = dict.fromkeys(
            (sc_mod.FIRST_NONFINITE, sc_mod.BEST_EVAL, sc_mod.CRASH_STEP, sc_mod.RSS_256MIB)
        )
        self.evals: list[tuple[int, float]] = []
        self.losses: list[float] = []
        self.rss0 = _rss()
        self.t0 = time.time()
        self.step = 0  # the step running now

    def after_step(self, step: int, loss: torch.Tensor) -> None:
        value = loss.item()
        self.losses.append(value)
        m = self.measured
        if m[sc_mod.FIRST_NONFINITE] is None and not math.isfinite(value):
            m[sc_mod.FIRST_NONFINITE] = step
        if m[sc_mod.RSS_256MIB] is None and _rss() - self.rss0 >= RSS_ONSET_BYTES:
            m[sc_mod.RSS_256MIB] = step
        self.step = step + 1

    def after_eval(self, step: int, val_loss: float) -> None:
        self.evals.append((step, val_loss))

    def crashed(self, exc: BaseException) -> None:
        self.measured[sc_mod.CRASH_STEP] = self.step
        self.label["exception"] = f"{type(exc).__name__}: {str(exc)[:200]}"

    def finish(self) -> dict[str, Any]:
        if self.evals:
            self.measured[sc_mod.BEST_EVAL] = min(self.evals, key=lambda e: e[1])[0]
        onset = self.sc.onset
        finite = [v for v in self.losses if math.isfinite(v)]
        self.label.update(
            onset=onset if isinstance(onset, int) else self.measured[onset],
            measured=self.measured,
            steps_run=self.step,
            wall_s=round(time.time() - self.t0, 3),
            loss_first=finite[0] if finite else None,
            loss_last=self.losses[-1] if self.losses else None,
            evals=[[s, round(v, 5)] for s, v in self.evals],
        )
        return self.label


def train(sc: sc_mod.Scenario, seed: int, out: str | None, raw: bool, every: int) -> int:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    task = make_task(sc.task, seed, sc.n_train, sc.label_noise, sc.shift)
    model = build_model(sc.model, task.shape, **sc.model_opts)
    if sc.pretrain_steps:
        pretrain(sc, model, task, seed)
    optimizer = make_optimizer(sc, model)
    scheduler = make_schedule(sc, optimizer)
    criterion = make_criterion(sc, task)
    if sc.loop_fault == "grow_batch":
        loader: Any = growing_batches(task, sc.batch_size, 2, sc.steps, seed)
    elif sc.shift_at:  # the data mix changes at step shift_at
        assert task.shifted is not None
        first, _ = make_loader(task.train, sc.batch_size, sc.shift_at, seed, sc.data_fault)
        then, _ = make_loader(task.shifted, sc.batch_size, sc.steps - sc.shift_at, seed + 1)
        loader = itertools.chain(first, then)
    else:
        loader, _ = make_loader(task.train, sc.batch_size, sc.steps, seed, sc.data_fault)
    held_out = eval_batches(task.test) if sc.eval_every else []
    keep_graph = sc.loop_fault == "keep_graph"  # the graph_leak bug (two lines below)
    forget_zero_grad = sc.loop_fault == "no_zero_grad"
    losses: list[Any] = []
    watch = Watch(sc, seed)

    if raw:
        probe_cm: Any = RawProbe(model, optimizer, every)
    else:
        from dltop.probe import Probe

        probe_cm = Probe(path=out, model=model, optimizer=optimizer)
    try:
        with probe_cm as probe:
            if sc.mem_cap_mib:
                cap_address_space(sc.mem_cap_mib)
            for step, (x, y) in enumerate(probe.loader(loader)):
                loss = criterion(model(x), y)
                loss.backward(retain_graph=keep_graph)
                norm = nn.utils.clip_grad_norm_(model.parameters(), sc.clip) if sc.clip else None
                optimizer.step()
                if not forget_zero_grad:
                    optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                losses.append(loss if keep_graph else loss.item())  # should be loss.item()
                watch.after_step(step, loss)
                probe.step(loss=loss, grad_norm=norm)
                if sc.eval_every and (step + 1) % sc.eval_every == 0:
                    val_loss = evaluate(model, held_out, criterion)
                    watch.after_eval(step, val_loss)
                    probe.eval(loss=val_loss)
    except BaseException as exc:
        watch.crashed(exc)
        raise
    finally:
        label = watch.finish()
        if raw:
            print(json.dumps({k: label[k] for k in ("onset", "measured", "steps_run", "wall_s")}))
        elif out:
            Path(out + ".label.json").write_text(json.dumps(label, indent=1))
    return 0


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario", help="a name from tests/faults/scenarios.py")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="log path (.jsonl); required unless --raw")
    p.add_argument("--raw", action="store_true", help="no probe: print the raw curves")
    p.add_argument("--print-every", type=int, default=10)
    args = p.parse_args(argv)
    if not args.raw and not args.out:
        p.error("--out is required unless --raw")
    return train(sc_mod.get(args.scenario), args.seed, args.out, args.raw, args.print_every)


if __name__ == "__main__":
    sys.exit(main())
