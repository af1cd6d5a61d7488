"""stall: one sample sits on a network mount that stops answering; training hangs.

The dataset reads its samples from "remote storage". Sample 6400 (the first of batch
100) is on a server that has stopped replying: the read blocks until the storage
client's 70-second timeout, then succeeds on retry. Nothing crashes, nothing is logged,
the process is alive and uses no CPU: the training loop simply waits in the data
loader's ``next()``. In a real run the wait is often endless (a dead NFS mount, a
deadlocked worker, a collective waiting for a rank that died).

The probe's writer thread keeps sending heartbeats while the training thread is stuck,
so dltop can tell "alive but not stepping" from "finished" or "dead": it raises
``stall`` once no step has come for max(10 x the usual step time, 60 s); its checklist
points at the data pipeline, I/O and distributed peers (``py-spy dump --pid PID``).
This demo takes about 80 s: the hang itself lasts 70 s, just past the 60 s default.

    python -m dltop.demos.stall [--out PATH] [--device cpu|cuda]
"""

import threading

import torch
from dltop.demos._common import parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, Dataset

HANG_SECONDS = 70.0  # the storage client's timeout


class RemoteDataset(Dataset):
    """Synthetic samples "fetched from remote storage"; one of them is on a dead server."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 32)
        self.y = (self.x[:, :16].sum(dim=1) > 0).long()
        self.no_reply = threading.Event()  # the dead server's reply: never comes

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == 6400:  # BUG (of the storage): this read blocks until the client times out
            self.no_reply.wait(timeout=HANG_SECONDS)
        return self.x[i], self.y[i]


def main() -> None:
    args = parse_args("stall")
    device = setup(args)
    print(
        "stall: sample 6400 lives on a storage server that stopped answering, so the loader blocks for 70 s."
    )

    # Read in storage order (shuffle=False), one batch of 64 at a time.
    loader = DataLoader(RemoteDataset(12_800), batch_size=64, shuffle=False)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 2)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for xb, yb in probe.loader(loader):
            xb, yb = xb.to(device), yb.to(device)
            loss = criterion(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss)
    print(f"stall: done, log in {args.out}")


if __name__ == "__main__":
    main()
