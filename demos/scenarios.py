"""The table of scenarios: what each plain-PyTorch demo changes in the one training loop.

Every demo below runs the same loop (``runner.py``). Its entry says only what differs:
the data, the model, the optimizer and its schedule, the loss, how long it trains, and
the fault. A fault is a parameter where it can be one (a learning rate, a missing
shuffle) and a small named piece where it cannot (a dataset that hangs, a hook that
keeps a tensor). The line that plants each fault is marked ``# BUG``; the demo's own
module (``nan.py``...) tells the whole story: what goes wrong and what dltop raises.

What an entry does not say is in the catalogue (``_common._TABLE``): the alert the demo
must end with, its step budget, and its pace (the steps spread over ~30 s, or none).
The catalogue stays free of torch for the viewer; this module imports torch, and only a
running demo imports it.

Random numbers are drawn as the demos always drew them: data first, then the model,
after ``setup`` seeded torch, so every run of a demo is the same run.
"""

from __future__ import annotations

import itertools
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch
from dltop.demos._common import noisy_teacher_data
from torch import Tensor, nn
from torch.nn import functional as F
from torch.optim import SGD, Adam, Optimizer
from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, LRScheduler
from torch.utils.data import ConcatDataset, DataLoader, Dataset, TensorDataset

Batches = Iterable[tuple[Tensor, Tensor]]


class Data(NamedTuple):
    train: Batches  # one pass is one epoch
    held_out: tuple[Tensor, Tensor] = (torch.empty(0), torch.empty(0))  # never trained on


@dataclass(frozen=True)
class Scenario:
    """One demo: everything the training loop takes from it."""

    intro: str  # printed first, after "NAME: ": what it is about to break
    data: Callable[[], Data]
    model: Callable[[], nn.Module]
    optimizer: Callable[[Iterator[nn.Parameter]], Optimizer]
    schedule: Callable[[Optimizer], LRScheduler] | None = None  # stepped after every step
    loss: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy
    epochs: int = 1
    clip: float = 0.0  # clip the gradient norm to this (0: no clipping)
    log_acc: bool = False  # record the training batch's accuracy with each step
    eval_every: int = 0  # evaluate on the held-out set every N steps (0: never)
    # a fault hook after the optimizer step: (model, x_val, y_val) -> more values to record
    after_step: Callable[[nn.Module, Tensor, Tensor], dict[str, Tensor]] | None = None
    on_start: Callable[[torch.device], None] | None = None  # inside the probe, before step 0
    seconds: float = float("inf")  # stop after this long...
    max_steps: int = 0  # ... or this many steps (0: no limit)


# -------------------------------------------------------------------- common pieces


def mlp(*sizes: int, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers of these sizes, ``act`` between them: ``mlp(32, 128, 10)``."""
    layers: list[nn.Module] = []
    for n_in, n_out in itertools.pairwise(sizes):
        layers += [nn.Linear(n_in, n_out), act()]
    return nn.Sequential(*layers[:-1])


def teacher(
    n: int, d_in: int, hidden: int, out: int, classes: bool = True
) -> tuple[Tensor, Tensor]:
    """``n`` Gaussian inputs and what a random "teacher" network says of them: its
    argmax (``out`` classes), or its outputs (a regression) with ``classes=False``."""
    net = mlp(d_in, hidden, out, act=nn.Tanh)
    with torch.no_grad():
        x = torch.randn(n, d_in)
        y = net(x)
    return x, y.argmax(dim=1) if classes else y


def shuffled(x: Tensor, y: Tensor, batch_size: int, held_out: int = 0) -> Data:
    """Batches of ``(x, y)`` in a new order every epoch, the last short one dropped; the
    last ``held_out`` samples kept apart, never trained on."""
    n = len(x) - held_out
    train = TensorDataset(x[:n], y[:n])
    loader = DataLoader(train, batch_size=batch_size, shuffle=True, drop_last=True)
    return Data(loader, (x[n:], y[n:]))


# ------------------------------------------------- the faults that need more than a value


def sensor_files() -> Data:
    """explode: two files of a noisy sine-like sensor, 16 past readings -> the next,
    read in order (a time series); the second file is in millimetres."""

    def sensor_file(n: int, scale: float) -> TensorDataset:
        t = torch.arange(n + 16, dtype=torch.float32)
        signal = torch.sin(t / 7) + 0.5 * torch.sin(t / 3.1) + 0.05 * torch.randn(n + 16)
        windows = (signal * scale).unfold(0, 17, 1)[:n]
        return TensorDataset(windows[:, :16], windows[:, 16:])

    metres = sensor_file(64 * 150, scale=1.0)
    millimetres = sensor_file(64 * 150, scale=1000.0)  # BUG: same sensor, different unit
    files: ConcatDataset[tuple[Tensor, ...]] = ConcatDataset([metres, millimetres])
    return Data(DataLoader(files, batch_size=64, shuffle=False))  # a time series: in order


def sorted_by_class() -> Data:
    """oscillation: 1280 samples of each of 10 classes, stored class by class (BUG 1) and
    read in that order (BUG 2: ``shuffle=False``)."""
    x, y = teacher(60_000, 32, 64, 10)
    order = torch.cat([torch.nonzero(y == c).flatten()[:1280] for c in range(10)])  # BUG (1)
    return Data(DataLoader(TensorDataset(x[order], y[order]), batch_size=64, shuffle=False))  # (2)


class SlowDiskDataset(Dataset[tuple[Tensor, Tensor]]):
    """data_bound: samples that cost 0.5 ms each to "load", like small files on a slow disk."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 64)
        self.y = (self.x[:, :32].sum(dim=1) > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        time.sleep(0.0005)  # stands in for open() + decode of one sample file
        return self.x[i], self.y[i]


val_history: list[Tensor] = []  # leak: every step's held-out loss, "for a plot at the end"


def keep_held_out_loss(model: nn.Module, x_val: Tensor, y_val: Tensor) -> dict[str, Tensor]:
    """leak: the loss on a fixed held-out batch, every step, kept in :data:`val_history`."""
    val_loss = F.cross_entropy(model(x_val), y_val)  # BUG: no torch.no_grad() ...
    val_history.append(val_loss)  # ... and kept as a tensor: its graph stays alive
    return {"val_loss": val_loss}


def doubling_batches() -> Iterator[tuple[Tensor, Tensor]]:
    """oom: synthetic batches; the batch size doubles every 4 steps, like a batch-size finder."""
    batch_size = 1024
    while True:
        for _ in range(4):
            yield torch.randn(batch_size, 64), torch.randint(0, 10, (batch_size,))
        batch_size *= 2  # BUG: nothing stops it at what fits


OOM_CAP_BYTES = 768 * 2**20  # how much memory the oom demo allows itself for the training


def cap_memory(device: torch.device) -> None:
    """oom: make the out-of-memory come early and harmlessly, a limit the process sets on itself."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, OOM_CAP_BYTES / total))
        return
    if not sys.platform.startswith("linux"):  # without a working RLIMIT_AS, nothing would stop it
        raise SystemExit("oom: the CPU version needs Linux (RLIMIT_AS); try --device cuda")
    with open("/proc/self/statm") as f:  # first field: address space in use, in pages
        in_use = int(f.read().split()[0]) * resource.getpagesize()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = in_use + OOM_CAP_BYTES
    limit = limit if hard == resource.RLIM_INFINITY else min(hard, limit)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


class RemoteDataset(Dataset[tuple[Tensor, Tensor]]):
    """stall: synthetic samples "fetched from remote storage"; one is on a dead server."""

    HANG_SECONDS = 70.0  # the storage client's timeout

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 32)
        self.y = (self.x[:, :16].sum(dim=1) > 0).long()
        self.no_reply = threading.Event()  # the dead server's reply: never comes

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        if i == 6400:  # BUG (of the storage): this read blocks until the client times out
            self.no_reply.wait(timeout=self.HANG_SECONDS)
        return self.x[i], self.y[i]


BATCH_SIZE = 64  # crash: the batch size, also (wrongly) written into the model


class Net(nn.Module):
    """crash: a small image classifier that assumes every batch is full."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = x.view(BATCH_SIZE, -1)  # BUG: assumes every batch is full; x.flatten(1) is right
        return self.fc2(torch.relu(self.fc1(x)))


def images() -> Data:
    """crash: 2000 synthetic 28x28 "images" (not a multiple of 64), labelled by a random
    linear teacher."""
    x = torch.randn(2000, 1, 28, 28)
    y = (x.flatten(1) @ torch.randn(28 * 28, 10)).argmax(dim=1)
    return Data(DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True))


def overfit_data() -> Data:
    """overfit: 128 training samples, 25 % of them mislabelled, and 2048 held out."""
    x_train, y_train, x_val, y_val = noisy_teacher_data()
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
    return Data(loader, (x_val, y_val))


# ------------------------------------------------------------------------ the table

# Each entry: what its demo changes, the fault marked # BUG. The story of each (what goes
# wrong, what dltop raises, the fix) is in the demo's own module, demos/NAME.py.
# fmt: off
SCENARIOS: dict[str, Scenario] = {
    # healthy: nothing is wrong; what quiet looks like (Adam, a cosine schedule, evaluations).
    "healthy": Scenario(
        intro="a well-tuned run (Adam, cosine schedule, held-out eval), so dltop should stay quiet.",
        data=lambda: shuffled(*teacher(10_240, 20, 32, 4), batch_size=64, held_out=2048),
        model=lambda: mlp(20, 128, 128, 4),
        optimizer=lambda params: Adam(params, lr=3e-3),
        schedule=lambda opt: CosineAnnealingLR(opt, T_max=5 * 128),  # the whole run: 5 x 128 steps
        epochs=5, log_acc=True, eval_every=64,
    ),
    # nan: the lr warms up to 4.0, past where SGD diverges (~2): the weights blow up, loss NaN.
    "nan": Scenario(
        intro="warming the learning rate up to 4.0 (several times too high), so SGD diverges until the loss is NaN.",
        data=lambda: shuffled(*teacher(8192, 32, 64, 4, classes=False), batch_size=64),
        model=lambda: mlp(32, 256, 256, 4, act=nn.Tanh),
        # BUG: a peak learning rate several times too high, reached by a linear warm-up over 200 steps
        optimizer=lambda params: SGD(params, lr=4.0, momentum=0.9),
        schedule=lambda opt: LambdaLR(opt, lambda s: min(1.0, (s + 1) / 200)),
        loss=F.mse_loss, epochs=3,
    ),
    # explode: the second data file is in millimetres: the grad norm jumps ~1e5x, clipping hides it.
    "explode": Scenario(
        intro="the second data file is in millimetres, not metres, so input scale and gradients jump ~1000x.",
        data=sensor_files,  # BUG: see sensor_files
        model=lambda: mlp(16, 64, 64, 1, act=nn.Tanh),
        optimizer=lambda params: SGD(params, lr=0.01, momentum=0.9),
        loss=F.mse_loss, clip=1.0,  # clipping hides it from the loss
    ),
    # vanishing: each sigmoid scales the backward signal by <= 0.25: the first layers never learn.
    "vanishing": Scenario(
        intro="20 stacked sigmoid layers shrink the gradient at every layer, so the first ones never learn.",
        data=lambda: shuffled(*teacher(8192, 32, 64, 10), batch_size=64),
        # BUG: a deep sigmoid stack (20 layers), no normalization, no residuals
        model=lambda: mlp(32, *[64] * 20, 10, act=nn.Sigmoid),
        optimizer=lambda params: SGD(params, lr=0.1, momentum=0.9),
        epochs=4,
    ),
    # dead_units: oversized updates push the ReLUs negative for every input; they never come back.
    "dead_units": Scenario(
        intro="SGD at lr 0.5, momentum 0.9, no warm-up, drives the ReLUs negative for good.",
        data=lambda: shuffled(*teacher(8192, 32, 64, 10), batch_size=64),
        model=lambda: mlp(32, 256, 256, 10),
        optimizer=lambda params: SGD(params, lr=0.5, momentum=0.9),  # BUG: too high, no warm-up
        epochs=4,
    ),
    # plateau: every update is real but a thousand times too small: the loss never moves.
    "plateau": Scenario(
        intro="Adam with lr=1e-6 instead of 1e-3 takes steps too small to move the loss at all.",
        data=lambda: shuffled(*teacher(16_384, 32, 64, 10), batch_size=256),
        model=lambda: mlp(32, 128, 128, 10),
        optimizer=lambda params: Adam(params, lr=1e-6),  # BUG: meant 1e-3
        epochs=6,
    ),
    # oscillation: 20 batches of one class, then the next: each is forgotten as the next is learned.
    "oscillation": Scenario(
        intro="the data is sorted by class and not shuffled, so the loss saws up and down batch after batch.",
        data=sorted_by_class,  # BUG: see sorted_by_class
        model=lambda: mlp(32, 128, 128, 10),
        optimizer=lambda params: Adam(params, lr=1e-3),
        epochs=3,
    ),
    # overfit: the net memorizes 128 noisy samples: train loss falls, the eval loss climbs.
    "overfit": Scenario(
        intro="a 280k-parameter net on 128 noisy samples memorizes them, so held-out loss climbs.",
        data=overfit_data,  # BUG: 128 samples, a quarter mislabelled, for a net this big
        model=lambda: mlp(32, 512, 512, 10),
        optimizer=lambda params: Adam(params, lr=3e-4),  # no weight decay, no early stopping
        epochs=200, eval_every=20,
    ),
    # data_bound: 64 slow reads per batch, one after the other, while the model sits idle.
    "data_bound": Scenario(
        intro="every sample takes 0.5 ms to load and num_workers=0, so the model waits on data.",
        # BUG: num_workers=0 loads every sample in the training process, one after the other
        data=lambda: Data(DataLoader(SlowDiskDataset(4096), batch_size=64, shuffle=True, num_workers=0)),
        model=lambda: mlp(64, 128, 2),
        optimizer=lambda params: Adam(params, lr=1e-3),
        epochs=3,
    ),
    # leak: a held-out loss kept with its graph, every step (~0.5 MB): memory only grows.
    "leak": Scenario(
        intro="each step's held-out loss is kept as a tensor with its graph, so ~0.5 MB more stays alive every step.",
        data=lambda: shuffled(*teacher(16_384 + 48, 64, 64, 10), batch_size=128, held_out=48),
        model=lambda: mlp(64, 1024, 1024, 10),
        optimizer=lambda params: Adam(params, lr=1e-3),
        after_step=keep_held_out_loss,  # BUG: see keep_held_out_loss
        # 30 s or 1600 steps (at most ~800 MB kept) so it never hurts the machine; a real run goes on
        epochs=13, seconds=30, max_steps=1600,
    ),
    # oom: the batch doubles until a real allocation fails, under a cap the demo sets on itself.
    "oom": Scenario(
        intro="doubling the batch size every 4 steps under a 768 MB cap until a real allocation fails.",
        data=lambda: Data(doubling_batches()),  # BUG: see doubling_batches
        model=lambda: mlp(64, 4096, 10),  # a wide layer: its activations (16 KB a sample) grow
        optimizer=lambda params: SGD(params, lr=0.01),
        on_start=cap_memory,
    ),
    # stall: one read blocks for 70 s on a dead storage server; the process is alive, not stepping.
    "stall": Scenario(
        intro="sample 6400 lives on a storage server that stopped answering, so the loader blocks for 70 s.",
        # BUG: see RemoteDataset; read in storage order (no shuffling), one batch of 64 at a time
        data=lambda: Data(DataLoader(RemoteDataset(12_800), batch_size=64, shuffle=False)),
        model=lambda: mlp(32, 128, 2),
        optimizer=lambda params: Adam(params, lr=1e-3),
    ),
    # crash: a hard-coded batch size in a reshape: the epoch's last, 16-sample batch crashes.
    "crash": Scenario(
        intro="the model reshapes with a hard-coded batch size, so the epoch's last, smaller batch crashes.",
        data=images,
        model=Net,  # BUG: see Net.forward
        optimizer=lambda params: Adam(params, lr=1e-3),
        epochs=3,
    ),
}
# fmt: on
