"""crash: a shape bug that only bites on the last, smaller batch of the epoch.

The model flattens its images with ``x.view(BATCH_SIZE, -1)``: the batch size is
hard-coded. The dataset has 2000 images, not a multiple of 64, so the epoch's last
batch holds 16 images; ``view`` happily reshapes them to 64 rows of 196 values, and
the first linear layer fails with "mat1 and mat2 shapes cannot be multiplied". The
exception leaves the ``with Probe(...)`` block, which records it (type, message,
traceback) and re-raises it unchanged, so the script exits with an error like any
crashed training.

dltop shows the ``crash`` alert with the exception, the step it happened at, and a
checklist for shape errors. Fix: ``x.flatten(1)`` (or ``x.view(x.size(0), -1)``).

    python -m dltop.demos.crash [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 64


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(BATCH_SIZE, -1)  # BUG: assumes every batch is full; x.flatten(1) is right
        return self.fc2(torch.relu(self.fc1(x)))


def main() -> None:
    args = parse_args("crash")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "crash: the model reshapes with a hard-coded batch size, so the epoch's last, smaller batch crashes."
    )

    # Synthetic 28x28 "images": 2000 of them, labelled by a random linear teacher.
    x = torch.randn(2000, 1, 28, 28)
    y = (x.flatten(1) @ torch.randn(28 * 28, 10)).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True)

    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for _epoch in range(3):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss)
                pace()
    print(f"crash: done, log in {args.out}")  # never reached


if __name__ == "__main__":
    main()
