"""plateau: a learning rate a thousand times too small, so the loss never moves.

The optimizer is Adam with ``lr=1e-6`` where ``1e-3`` was meant (a typo in an exponent
is all it takes). Every update is real but a thousand times too small: the loss sits at
its starting value, minute after minute, and nothing else looks wrong — no NaN, no
spike, healthy gradients. Without a monitor this run burns its whole budget.

dltop raises ``plateau`` when the windowed median loss has improved by less than 0.1 %
for several windows in a row while the learning rate is positive; its checklist shows
the learning rate and suggests an LR range test.

    python -m dltop.demos.plateau [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("plateau")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "plateau: Adam with lr=1e-6 instead of 1e-3 takes steps too small to move the loss at all."
    )

    # Synthetic data: a random "teacher" network labels Gaussian inputs into 10 classes.
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))
    with torch.no_grad():
        x = torch.randn(16_384, 32)
        y = teacher(x).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, drop_last=True)

    model = nn.Sequential(
        nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)  # BUG: meant 1e-3
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for _epoch in range(6):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss)
                pace()
    print(f"plateau: done, log in {args.out}")


if __name__ == "__main__":
    main()
