"""Quick start: a plain PyTorch training with the three probe lines, on synthetic data.

Run it with ``make demo`` (or ``python demos/quickstart.py``). It trains a small
MLP to fit a noisy nonlinear function for ~15 s on a CPU, writes
``dltop-runs/quickstart-<time>.jsonl`` and prints where the log is; open that log
with ``dltop <path>``. The three lines marked ``# dltop`` are all a user adds; those
marked ``# dltop, optional`` time the data wait and record evaluations.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from dltop.probe import Probe  # dltop
from dltop.probe.probe import default_path
from torch.utils.data import DataLoader, TensorDataset


def make_data(n: int, seed: int) -> TensorDataset:
    """Inputs and the outputs of a fixed random "teacher" network, plus a little noise.

    Learnable (the student has the capacity) but not in one step; train and
    validation sets share the teacher, so validation loss falls with training loss.
    """
    teacher = torch.Generator().manual_seed(1234)
    w1 = torch.randn(32, 64, generator=teacher) / math.sqrt(32)
    w2 = torch.randn(64, 1, generator=teacher) / math.sqrt(64)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    y = torch.tanh(x @ w1) @ w2 + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main() -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument(
        "--path", default=None, help="log path (default: dltop-runs/quickstart-<time>.jsonl)"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)  # be gentle with a shared machine; the demo is small anyway
    torch.manual_seed(0)

    train = DataLoader(make_data(16384, seed=0), batch_size=64, shuffle=True)
    val_x, val_y = make_data(1024, seed=1).tensors
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))
    path = args.path or default_path("quickstart")

    t0 = time.perf_counter()
    with Probe(path=path, model=model, optimizer=opt) as probe:  # dltop
        for epoch in range(args.epochs):
            model.train()
            for x, y in probe.loader(train):  # dltop, optional
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                probe.step(loss=loss)  # dltop: before sched.step(), so lr is this step's
                sched.step()
            with probe.phase("eval"), torch.no_grad():  # dltop, optional
                model.eval()
                val = torch.nn.functional.mse_loss(model(val_x), val_y)
            probe.eval(loss=val)  # dltop, optional
            print(
                f"epoch {epoch + 1:2d}/{args.epochs}  train loss {loss.item():.4f}  val loss {val.item():.4f}"
            )
    print(f"\n{probe.steps} steps in {time.perf_counter() - t0:.1f} s")
    print(f"log written to {path}")
    print(f"view it with:  dltop {path}")
    return path


if __name__ == "__main__":
    main()
