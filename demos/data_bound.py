"""data_bound: the model waits for data most of every step.

Each sample is "read from disk" by a dataset whose ``__getitem__`` takes half a
millisecond (a ``time.sleep`` standing in for opening and decoding a file), and the
DataLoader runs with ``num_workers=0``, so the 64 reads of a batch happen one after
the other in the training process while the model sits idle. The forward and backward
pass take a couple of milliseconds; fetching the batch takes over thirty.

dltop raises ``data_bound`` from the share of each step spent blocked in the loader's
``next()`` (``data_time / step_time``, shown in the timing panel); its checklist
suggests ``num_workers > 0``, ``pin_memory``, caching decoded samples, moving
augmentation to the GPU or a larger model per batch.

    python -m dltop.demos.data_bound [--out PATH] [--device cpu|cuda]
"""

import time

import torch
from dltop.demos._common import parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDiskDataset(Dataset):
    """Synthetic samples that cost 0.5 ms each to "load", like small files on a slow disk."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 64)
        self.y = (self.x[:, :32].sum(dim=1) > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.0005)  # stands in for open() + decode of one sample file
        return self.x[i], self.y[i]


def main() -> None:
    args = parse_args("data_bound")
    device = setup(args)
    print(
        "data_bound: every sample takes 0.5 ms to load and num_workers=0, so the model waits on data."
    )

    # BUG: num_workers=0 loads every sample in the training process, one after the other.
    loader = DataLoader(SlowDiskDataset(4096), batch_size=64, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2)).to(device)
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
    print(f"data_bound: done, log in {args.out}")


if __name__ == "__main__":
    main()
