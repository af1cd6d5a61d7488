"""leak: a loss kept with its autograd graph, every step, so memory only grows.

Each step also measures the loss on a fixed held-out batch "to plot later" and appends
it to a Python list. That loss was computed with autograd on (no ``torch.no_grad()``)
and is kept as a tensor (no ``.item()``), so it holds on to its whole graph, including
the activations saved for a backward pass that never comes: about 0.5 MB per step here.
Nothing is ever freed; the process grows until, in a real run, the machine or the GPU
runs out. This demo stops after 30 seconds or 1600 steps, whichever comes first (at
most ~800 MB kept), so it never hurts your machine.

dltop raises ``memory_growth`` from the steady, never pulled-back rise of the process's
resident memory (allocated memory on a GPU); its checklist suggests ``.item()`` /
``.detach()`` for anything you keep, and ``torch.no_grad()`` for evaluation.

    python -m dltop.demos.leak [--out PATH] [--device cpu|cuda]
"""

import time

import torch
from dltop.demos._common import parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("leak")
    device = setup(args)
    print(
        "leak: each step's held-out loss is kept as a tensor with its graph, so ~0.5 MB more stays alive every step."
    )

    # Synthetic data: a random "teacher" network labels Gaussian inputs into 10 classes.
    teacher = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))
    with torch.no_grad():
        x = torch.randn(16_384 + 48, 64)
        y = teacher(x).argmax(dim=1)
    loader = DataLoader(
        TensorDataset(x[:16_384], y[:16_384]), batch_size=128, shuffle=True, drop_last=True
    )
    x_val, y_val = x[16_384:].to(device), y[16_384:].to(device)  # a fixed held-out batch of 48

    model = nn.Sequential(
        nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    val_history: list[torch.Tensor] = []  # for a plot at the end
    deadline, max_steps = time.monotonic() + 30, 1600  # a real run would go on until it dies

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        while time.monotonic() < deadline and len(val_history) < max_steps:
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()

                val_loss = criterion(model(x_val), y_val)  # BUG: no torch.no_grad() ...
                val_history.append(val_loss)  # ... and kept as a tensor: its graph stays alive
                probe.step(loss=loss, val_loss=val_loss)
                if time.monotonic() > deadline or len(val_history) >= max_steps:
                    break
    print(f"leak: done, log in {args.out}")


if __name__ == "__main__":
    main()
