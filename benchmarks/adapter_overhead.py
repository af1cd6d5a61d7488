"""What the framework adapters cost per optimizer step, on the training thread.

Run:  .venv/bin/python benchmarks/adapter_overhead.py [--quick]
(also section (h) of ``benchmarks/probe_overhead.py``)

One tiny model (an 8-32-1 MLP, batch 8, SGD), so that the framework's own per-step work
dominates and any cost we add shows. Three loops, each measured bare and with its
recorder, in the same run:

- a plain PyTorch loop: bare, and with ``Probe`` (``probe.step()`` plus the grad-norm
  hooks), the reference the adapters are held to;
- Lightning: bare, with an empty ``Callback`` (what the framework charges any callback:
  Lightning calls every hook of every callback through its profiler), with
  ``DltopCallback``, and with the framework's own per-step logging
  (``self.log("train_loss", loss)`` with a ``CSVLogger`` and ``log_every_n_steps=1``);
- the Hugging Face ``Trainer``: bare (no logging step), with an empty ``TrainerCallback``,
  with ``DltopCallback``, and with ``logging_steps=1`` (its own logging every step: a device read-back of the loss, the
  gradient norm, the callbacks' ``on_log``, the printed line).

The figure is the training thread's CPU time per step (``time.thread_time`` at each step
end: the probe's writer and sampler threads are not in it), median over every step of
every round; variants are interleaved round by round, and the cost of a recorder is its
median minus the bare loop's. Ratios measured in one run are what to trust.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from dltop.probe import Probe

FEATURES, HIDDEN, BATCH = 8, 32, 8


def _data(torch: Any, n: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, FEATURES, generator=g)
    return x, x @ torch.randn(FEATURES, 1, generator=g)


def _net(torch: Any) -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)
    )


def _per_step(marks: list[float]) -> list[float]:
    """Thread CPU seconds between consecutive step ends; the first steps (warm-up) dropped."""
    d = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    return d[5:]


# --- a plain loop -------------------------------------------------------------------------
def plain(variant: str, steps: int, tmp: str) -> list[float]:
    import torch

    x, y = _data(torch, steps * BATCH)
    model = _net(torch)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mse = torch.nn.functional.mse_loss
    marks: list[float] = []
    probe = None
    if variant == "probe":
        probe = Probe(
            path=os.path.join(tmp, f"plain-{time.monotonic_ns()}.jsonl"),
            model=model,
            optimizer=opt,
            socket=False,
            system=False,
        ).start()
    for i in range(steps):
        xb, yb = x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]
        loss = mse(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if probe is not None:
            probe.step(loss=loss)
        marks.append(time.thread_time())
    if probe is not None:
        probe.close()
    return _per_step(marks)


# --- Lightning ----------------------------------------------------------------------------
def lightning(variant: str, steps: int, tmp: str) -> list[float] | str:
    try:
        import lightning.pytorch as pl
        import torch
        from dltop.probe.lightning import DltopCallback
    except ImportError as e:
        return f"skipped: {e}"
    from torch.utils.data import DataLoader, TensorDataset

    x, y = _data(torch, steps * BATCH)

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net(torch)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            xb, yb = batch
            loss = torch.nn.functional.mse_loss(self.net(xb), yb)
            if variant == "self.log":
                self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    marks: list[float] = []

    class Marks(pl.Callback):
        def on_train_batch_end(self, *a: Any) -> None:
            marks.append(time.thread_time())

    callbacks: list[Any] = [Marks()]
    logger: Any = False
    if variant == "adapter":
        path = os.path.join(tmp, f"pl-{time.monotonic_ns()}.jsonl")
        callbacks.append(DltopCallback(path=path, socket=False, system=False))
    elif variant == "empty Callback":
        callbacks.append(pl.Callback())
    if variant == "self.log":
        logger = pl.loggers.CSVLogger(tmp, name=f"csv-{time.monotonic_ns()}")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(Net(), DataLoader(TensorDataset(x, y), batch_size=BATCH))
    return _per_step(marks)


# --- Hugging Face Trainer -------------------------------------------------------------------
def hf(variant: str, steps: int, tmp: str) -> list[float] | str:
    try:
        import torch
        import transformers
        from dltop.probe.hf import DltopCallback
    except ImportError as e:
        return f"skipped: {e}"
    transformers.logging.set_verbosity_error()
    x, y = _data(torch, steps * BATCH)

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net(torch)

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    marks: list[float] = []

    class Marks(transformers.TrainerCallback):
        def on_step_end(self, *a: Any, **kw: Any) -> None:
            marks.append(time.thread_time())

    callbacks: list[Any] = [Marks()]
    if variant == "adapter":
        path = os.path.join(tmp, f"hf-{time.monotonic_ns()}.jsonl")
        callbacks.append(DltopCallback(path=path, socket=False, system=False))
    elif variant == "empty Callback":
        callbacks.append(transformers.TrainerCallback())
    args = transformers.TrainingArguments(
        output_dir=os.path.join(tmp, "hf-out"),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        logging_steps=1 if variant == "logging_steps=1" else 10**9,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=0,
        learning_rate=1e-3,
    )
    data = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    trainer = transformers.Trainer(
        model=Regressor(), args=args, train_dataset=data, callbacks=callbacks
    )
    with contextlib.redirect_stdout(io.StringIO()):  # logging_steps=1 prints every step
        trainer.train()
    return _per_step(marks)


LOOPS = {
    "plain loop": (plain, ("bare", "probe")),
    "Lightning": (lightning, ("bare", "empty Callback", "adapter", "self.log")),
    "HF Trainer": (hf, ("bare", "empty Callback", "adapter", "logging_steps=1")),
}


def measure(rounds: int, steps: int, tmp: str) -> dict[str, dict[str, float | str]]:
    """Median thread CPU s per step of every loop and variant, rounds interleaved."""
    samples: dict[str, dict[str, list[float]]] = {
        k: {v: [] for v in vs[1]} for k, vs in LOOPS.items()
    }
    skipped: dict[str, str] = {}
    for r in range(rounds):
        for loop, (fn, variants) in LOOPS.items():
            if loop in skipped:
                continue
            order = list(variants[r % len(variants) :] + variants[: r % len(variants)])
            for variant in order:
                got = fn(variant, steps, tmp)
                if isinstance(got, str):
                    skipped[loop] = got
                    break
                samples[loop][variant].extend(got)
    out: dict[str, dict[str, float | str]] = {}
    for loop, per in samples.items():
        if loop in skipped:
            out[loop] = {"skipped": skipped[loop]}
        else:
            out[loop] = {v: statistics.median(xs) for v, xs in per.items()}
    return out


def report(res: dict[str, dict[str, Any]], plain_step_us: float | None = None) -> None:
    print("(h) framework adapters: training-thread CPU per optimizer step, µs (tiny MLP, batch 8)")

    def us(x: float) -> str:
        return f"{x * 1e6:9.1f}"

    costs: dict[str, float] = {}
    for loop, per in res.items():
        if "skipped" in per:
            print(f"  {loop:<12} {per['skipped']}")
            continue
        base = per["bare"]
        for variant, v in per.items():
            extra = ""
            if variant != "bare":
                costs[f"{loop}:{variant}"] = v - base
                extra = f"   cost {us(v - base)} µs = {100 * (v - base) / base:6.1f} % of the step"
            print(f"  {loop:<12} {variant:<16} {us(v)} µs{extra}")
    probe_cost = costs.get("plain loop:probe")
    print()
    if probe_cost:
        print(
            f"  plain Probe (probe.step + grad-norm hooks)     cost {probe_cost * 1e6:7.1f} µs/step"
        )
        if plain_step_us is not None:
            print(f"  (probe.step(loss) alone, section (a): {plain_step_us:.2f} µs)")
    pairs = (
        ("Lightning:adapter", "plain loop:probe", "Lightning adapter / plain Probe"),
        ("Lightning:empty Callback", "Lightning:adapter", "Lightning empty Callback / adapter"),
        ("Lightning:self.log", "Lightning:adapter", "Lightning self.log / Lightning adapter"),
        ("HF Trainer:adapter", "plain loop:probe", "HF adapter / plain Probe"),
        ("HF Trainer:empty Callback", "HF Trainer:adapter", "HF empty TrainerCallback / adapter"),
        ("HF Trainer:logging_steps=1", "HF Trainer:adapter", "HF logging_steps=1 / HF adapter"),
    )
    for num, den, label in pairs:
        if num in costs and den in costs and costs[den] > 0:
            print(f"  {label:<46} = {costs[num] / costs[den]:6.2f}x")
    print(
        "  cost = median CPU of the training thread per step minus the bare loop's; the\n"
        "  probe's writer thread is not in it. Medians of a shared machine: a cost under\n"
        "  ~5 µs is within noise.\n"
    )


def run(quick: bool = False, plain_step_us: float | None = None) -> None:
    rounds, steps = (2, 120) if quick else (5, 300)
    with tempfile.TemporaryDirectory() as tmp:
        report(measure(rounds, steps, tmp), plain_step_us)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"dltop adapter overhead (python {sys.version.split()[0]}, torch {torch.__version__})\n")
    run(args.quick)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
