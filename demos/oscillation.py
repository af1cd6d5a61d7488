"""oscillation: the training data is sorted by class and never shuffled.

The dataset was built class by class (all the 0s, then all the 1s, ...) and the
DataLoader keeps that order (``shuffle=False``). For twenty batches in a row the model
sees a single class, learns to answer it for everything, and the loss drops towards
zero; then the next class arrives, every prediction is wrong, and the loss jumps back
up. The curve saws up and down for the whole run and never settles, because each class
is forgotten while the next one is learned.

dltop raises ``oscillation`` when the windowed loss keeps swinging by more than a few
percent of its level (well above the batch-to-batch noise) with no net progress; its
checklist asks about shuffling, the learning rate and the batch size.

    python -m dltop.demos.oscillation [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("oscillation")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "oscillation: the data is sorted by class and not shuffled, so the loss saws up and down batch after batch."
    )

    # Synthetic data: a random "teacher" network labels Gaussian inputs into 10 classes,
    # 1280 samples of each, stored class by class.
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))
    with torch.no_grad():
        x = torch.randn(60_000, 32)
        y = teacher(x).argmax(dim=1)
    per_class = [torch.nonzero(y == c).flatten()[:1280] for c in range(10)]
    order = torch.cat(per_class)  # BUG (1): sorted by label
    loader = DataLoader(TensorDataset(x[order], y[order]), batch_size=64, shuffle=False)  # BUG (2)

    model = nn.Sequential(
        nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
    model.to(device)
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
    print(f"oscillation: done, log in {args.out}")


if __name__ == "__main__":
    main()
