"""Synthetic datasets and loaders for the fault suite, generated in-process from a seed.

Every task is learnable but not trivial (labels come from a random "teacher" or a
simple rule over noisy inputs), so a healthy training shows a falling, noisy loss
curve. Data-side faults are injected where they happen in real pipelines: in the
dataset's ``__getitem__`` (a slow decode, a blocking read, a shard that skipped its
normalisation), never by editing the training loop.

Items are whole batches (``BatchDataset``), served by a real ``torch.utils.data``
``DataLoader`` with ``batch_size=None``: the per-batch cost of the pipeline stays far
below a training step, so healthy runs are not data-bound by construction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

TASKS = ("vectors", "regression", "images", "sequences", "tokens")


@dataclass
class Split:
    x: torch.Tensor
    y: torch.Tensor


@dataclass
class Task:
    """A dataset: train and held-out splits, and the shape numbers the models need."""

    name: str
    train: Split
    test: Split
    shape: dict[str, int] = field(default_factory=dict)
    loss: str = "ce"  # "ce" (classification) or "mse" (regression)
    shifted: Split | None = None  # a second training mix (``make_task(shift=...)``)


def _vectors(
    n: int, g: torch.Generator, label_noise: float, shift: float = 0.0
) -> tuple[Split, dict[str, int], Split | None]:
    """Gaussian vectors labelled by a random tanh teacher. ``label_noise=1.0`` makes every
    label random (no signal). ``shift`` also draws a second training split from the same
    teacher with the inputs moved by ``shift`` along a random direction (another data mix)."""
    d, k = 32, 10
    x = torch.randn(n, d, generator=g)
    w1 = torch.randn(d, 64, generator=g) / d**0.5
    w2 = torch.randn(64, k, generator=g) / 8
    y = (torch.tanh(x @ w1) @ w2).argmax(1)
    flip = torch.rand(n, generator=g) < label_noise
    y[flip] = torch.randint(0, k, (int(flip.sum()),), generator=g)
    shifted = None
    if shift:
        u = torch.randn(d, generator=g)
        x2 = torch.randn(n, d, generator=g) + shift * u / u.norm()
        shifted = Split(x2, (torch.tanh(x2 @ w1) @ w2).argmax(1))
    return Split(x, y), {"d_in": d, "n_out": k}, shifted


def _regression(n: int, g: torch.Generator) -> tuple[Split, dict[str, int]]:
    """Linear targets over features with a spread of scales (an ill-conditioned quadratic)."""
    d = 16
    scales = torch.logspace(0, -1, d)  # curvature spread of 100x between directions
    x = torch.randn(n, d, generator=g) * scales
    w = torch.randn(d, 1, generator=g)
    y = x @ w + 0.05 * torch.randn(n, 1, generator=g)
    return Split(x, y), {"d_in": d, "n_out": 1}


def _images(n: int, g: torch.Generator) -> tuple[Split, dict[str, int]]:
    """16x16 images of one bar (horizontal, vertical, two diagonals) at a random place, in noise."""
    x = torch.randn(n, 1, 16, 16, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    pos = torch.randint(3, 13, (n,), generator=g)
    idx = torch.arange(16)
    for i in range(n):
        p, c = int(pos[i]), int(y[i])
        if c == 0:
            x[i, 0, p, :] += 1.0
        elif c == 1:
            x[i, 0, :, p] += 1.0
        elif c == 2:
            x[i, 0, idx, idx] += 1.0
        else:
            x[i, 0, idx, 15 - idx] += 1.0
    return Split(x, y), {"d_in": 256, "n_out": 4}


def _sequences(n: int, g: torch.Generator) -> tuple[Split, dict[str, int]]:
    """Length-20 sequences of 4 noisy features; the label is the feature with the largest sum."""
    x = torch.randn(n, 20, 4, generator=g) + 0.3 * torch.randn(n, 1, 4, generator=g)
    y = x.sum(1).argmax(1)
    return Split(x, y), {"d_in": 80, "n_out": 4, "features": 4}


def _tokens(n: int, g: torch.Generator) -> tuple[Split, dict[str, int]]:
    """Length-16 token sequences over 8 symbols; the label is the most frequent symbol."""
    x = torch.randint(0, 8, (n, 16), generator=g)
    counts = torch.nn.functional.one_hot(x, 8).sum(1).float()
    y = (counts + 0.01 * torch.arange(8)).argmax(1)  # ties go to the larger symbol
    return Split(x, y), {"d_in": 16, "n_out": 8, "vocab": 8, "seq_len": 16}


def make_task(
    name: str, seed: int, n_train: int = 4096, label_noise: float = 0.0, shift: float = 0.0
) -> Task:
    """The task ``name`` with ``n_train`` training samples and 1024 held-out ones."""
    g = torch.Generator().manual_seed(1000 + seed)
    n = n_train + 1024
    shifted = None
    if shift and name != "vectors":
        raise ValueError("only the vectors task has a shifted mix")
    if name == "vectors":
        split, shape, shifted = _vectors(n, g, label_noise, shift)
    elif name == "regression":
        split, shape = _regression(n, g)
    elif name == "images":
        split, shape = _images(n, g)
    elif name == "sequences":
        split, shape = _sequences(n, g)
    elif name == "tokens":
        split, shape = _tokens(n, g)
    else:
        raise ValueError(f"unknown task {name!r}")
    train = Split(split.x[:n_train], split.y[:n_train])
    test = Split(split.x[n_train:], split.y[n_train:])
    if shifted is not None:
        shifted = Split(shifted.x[:n_train], shifted.y[:n_train])
    return Task(name, train, test, shape, "mse" if name == "regression" else "ce", shifted)


@dataclass
class DataFault:
    """What goes wrong in the pipeline, if anything.

    - ``raw_columns``/``raw_scale``: those feature columns were never standardised
      (raw units, e.g. a price in dollars next to z-scored features).
    - ``raw_from_fetch``/``raw_every``: the same, but only for batches from a second data
      shard that starts being read at fetch number ``raw_from_fetch`` (every
      ``raw_every``-th batch comes from it).
    - ``sleep_s``: a slow decode/augmentation in ``__getitem__``, every batch.
    - ``hang_at_fetch``/``hang_s``: one blocking read (a network filesystem hiccup).
    - ``nan_at_fetch``: one corrupt record (a NaN feature) in that batch.
    """

    raw_columns: int = 0
    raw_scale: float = 1.0
    raw_from_fetch: int = 0
    raw_every: int = 1
    sleep_s: float = 0.0
    hang_at_fetch: int = -1
    hang_s: float = 0.0
    nan_at_fetch: int = -1


class BatchDataset(Dataset):
    """Item ``i`` is the ``i``-th batch of a fixed split; the last batch may be partial."""

    def __init__(self, split: Split, batch_size: int, fault: DataFault | None = None) -> None:
        self.split = split
        self.batch_size = batch_size
        self.fault = fault or DataFault()
        self.fetches = 0  # batches served so far (num_workers=0: one process, in order)

    def __len__(self) -> int:
        return -(-len(self.split.x) // self.batch_size)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.fault
        fetch = self.fetches
        self.fetches += 1
        sl = slice(i * self.batch_size, (i + 1) * self.batch_size)
        x, y = self.split.x[sl], self.split.y[sl]
        if f.sleep_s:
            time.sleep(f.sleep_s)
        if fetch == f.hang_at_fetch:
            time.sleep(f.hang_s)
        if fetch == f.nan_at_fetch:
            x = x.clone()
            x.view(len(x), -1)[0, 0] = float("nan")
        if (
            f.raw_columns
            and fetch >= f.raw_from_fetch
            and (fetch - f.raw_from_fetch) % f.raw_every == 0
        ):
            x = x.clone()
            x[:, : f.raw_columns] = x[:, : f.raw_columns] * f.raw_scale + f.raw_scale
        return x, y


def make_loader(
    split: Split, batch_size: int, steps: int, seed: int, fault: DataFault | None = None
) -> tuple[DataLoader, BatchDataset]:
    """A shuffled loader yielding exactly ``steps`` batches (several epochs when needed)."""
    ds = BatchDataset(split, batch_size, fault)
    g = torch.Generator().manual_seed(seed)
    sampler = RandomSampler(ds, replacement=False, num_samples=steps, generator=g)
    return DataLoader(ds, batch_size=None, sampler=sampler), ds


def eval_batches(split: Split, batch_size: int = 512) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The held-out split in fixed batches, for the periodic evaluation."""
    n = len(split.x)
    return [
        (split.x[i : i + batch_size], split.y[i : i + batch_size]) for i in range(0, n, batch_size)
    ]
