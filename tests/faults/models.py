"""Tiny models for the labelled fault suite: an MLP, a CNN, an LSTM and a transformer.

They are small enough that a few hundred steps take a few seconds on one CPU thread,
and ordinary enough that a fault injected into them behaves the way it does in a real
training. Faults that live in the architecture itself (a deep sigmoid stack, a
negative ReLU bias, a model whose autograd graph holds large activations) are options
here, so that the training loop in ``train.py`` stays the same plain loop for every
scenario.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Feed-forward classifier/regressor.

    ``act="sigmoid"`` with many layers is the textbook vanishing-gradient net: each
    sigmoid scales the gradient by at most 1/4. ``relu_bias`` sets every hidden bias
    to a constant after init; a large negative value is the "bad init" that kills
    ReLU units (their pre-activation is negative for every input).
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        width: int = 128,
        depth: int = 2,
        act: str = "relu",
        relu_bias: float | None = None,
    ) -> None:
        super().__init__()
        acts = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}
        layers: list[nn.Module] = []
        d = d_in
        for _ in range(depth):
            lin = nn.Linear(d, width)
            if relu_bias is not None:
                nn.init.constant_(lin.bias, relu_bias)
            layers += [lin, acts[act]()]
            d = width
        layers.append(nn.Linear(d, d_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


class FlatMLP(nn.Module):
    """An MLP that flattens its input with a hard-coded batch size.

    ``x.view(self.batch_size, -1)`` instead of ``x.flatten(1)`` is a common bug copied
    from tutorials: it works for every full batch and breaks on the last, smaller one
    of an epoch, where the view silently regroups the elements and the next matmul
    fails with ``mat1 and mat2 shapes cannot be multiplied``.
    """

    def __init__(self, d_in: int, d_out: int, batch_size: int, width: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.fc1 = nn.Linear(d_in, width)
        self.fc2 = nn.Linear(width, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(self.batch_size, -1)  # the bug: should be x.flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


class WideActMLP(nn.Module):
    """Wide residual blocks (LayerNorm, GELU, optionally a width x width Linear).

    Each block saves a few ``batch x width`` tensors for backward, so memory grows
    with the batch (the OOM scenario ramps it) and a loop that keeps every step's
    graph alive grows by MiBs per step (the leak scenario). ``mix=False`` drops the
    Linear so that big batches stay cheap to compute.
    """

    def __init__(
        self, d_in: int, d_out: int, width: int = 2048, blocks: int = 3, mix: bool = False
    ) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(blocks))
        self.mix = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks if mix else 0))
        self.out = nn.Linear(width, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x.flatten(1))
        for i, norm in enumerate(self.norms):
            a = torch.nn.functional.gelu(norm(h))
            h = h + (self.mix[i](a) if self.mix else a)
        return self.out(h)


class CNN(nn.Module):
    """Two conv layers and a linear head for 1x16x16 images."""

    def __init__(self, n_classes: int, channels: int = 8) -> None:
        super().__init__()
        c = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c, 2 * c, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * c * 4 * 4, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class LSTMClassifier(nn.Module):
    """One LSTM (or GRU, ``cell="gru"``) layer over a sequence of feature vectors; the
    last hidden state classifies."""

    def __init__(self, d_in: int, n_classes: int, hidden: int = 32, cell: str = "lstm") -> None:
        super().__init__()
        rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
        self.lstm = rnn(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class TinyTransformer(nn.Module):
    """A two-layer pre-norm transformer encoder over tokens, mean-pooled into a classifier."""

    def __init__(
        self, vocab: int, n_classes: int, seq_len: int, d_model: int = 32, layers: int = 2
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d_model, nhead=2, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True
        )
        layer.norm_first = True
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.tok(x) + self.pos)
        return self.head(h.mean(dim=1))


def build_model(name: str, task_shape: dict[str, int], **options: object) -> nn.Module:
    """The model a scenario names, sized for its dataset (``task_shape`` from data.py)."""
    d_in, n_out = task_shape["d_in"], task_shape["n_out"]
    if name == "mlp":
        return MLP(d_in, n_out, **options)  # type: ignore[arg-type]
    if name == "flat_mlp":
        return FlatMLP(d_in, n_out, **options)  # type: ignore[arg-type]
    if name == "wide_act_mlp":
        return WideActMLP(d_in, n_out, **options)  # type: ignore[arg-type]
    if name == "cnn":
        return CNN(n_out, **options)  # type: ignore[arg-type]
    if name == "lstm":
        return LSTMClassifier(task_shape["features"], n_out, **options)  # type: ignore[arg-type]
    if name == "transformer":
        return TinyTransformer(task_shape["vocab"], n_out, task_shape["seq_len"], **options)  # type: ignore[arg-type]
    raise ValueError(f"unknown model {name!r}")
