"""dead_units: a learning rate so large that the first updates kill the ReLUs.

A ReLU unit whose pre-activation is negative for every input outputs zero and gets
exactly zero gradient, so nothing can ever revive it. Here SGD with momentum 0.9 starts
at a learning rate of 0.5 with no warm-up (an effective step ten times larger): the
loss first falls, then oversized updates throw the biases far negative, the hidden
units go silent one after the other, and within a few hundred steps the loss is back
at chance level for good while the optimizer keeps running.

dltop raises ``dead_units`` from the per-layer share of exactly-zero gradient
elements (above 70 % for several checks while the loss is not improving); its
checklist suggests a lower learning rate or a warm-up, LeakyReLU/GELU, and checking the
initialization and input scaling.

    python -m dltop.demos.dead_units [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("dead_units")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "dead_units: SGD at lr 0.5, momentum 0.9, no warm-up, drives the ReLUs negative for good."
    )

    # Synthetic data: a random "teacher" network labels Gaussian inputs into 10 classes.
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))
    with torch.no_grad():
        x = torch.randn(8192, 32)
        y = teacher(x).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)

    model = nn.Sequential(
        nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)  # BUG: too high, no warm-up
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for _epoch in range(4):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss)
                pace()
    print(f"dead_units: done, log in {args.out}")


if __name__ == "__main__":
    main()
