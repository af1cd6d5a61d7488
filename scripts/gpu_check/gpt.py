"""A small GPT-style training: a causal transformer built from a config, random tokens.

No download, no tokenizer: token ids drawn on the device (never copied there from the
host, which would be a sync of the harness's own). One :class:`Trainer` per precision:

- ``fp32``: plain float32;
- ``bf16``: ``torch.autocast`` in bfloat16;
- ``fp16``: autocast in float16 with a ``GradScaler`` (unscaled before clipping).

Each step clips at ``clip`` with ``clip_grad_norm_`` and returns the pre-clip norm it
reports, left on the device: the in-run reference the probe's own norm is held to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 4096
    seq: int = 256
    d: int = 384
    heads: int = 6
    layers: int = 6
    batch: int = 16


# ~15 M parameters on the GPU (a nanoGPT "baby" model); a toy on the CPU
GPU_CONFIG = GPTConfig()
CPU_CONFIG = GPTConfig(vocab=128, seq=32, d=64, heads=2, layers=2, batch=8)


def config_for(device: str) -> GPTConfig:
    return GPU_CONFIG if device == "cuda" else CPU_CONFIG


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.d)
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d)
        self.proj = nn.Linear(cfg.d, cfg.d)
        self.ln2 = nn.LayerNorm(cfg.d)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d, 4 * cfg.d), nn.GELU(), nn.Linear(4 * cfg.d, cfg.d)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d)
        self.pos = nn.Embedding(cfg.seq, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d)
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_batches(
    cfg: GPTConfig, device: torch.device, n: int = 8, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches of (input, next-token target), drawn on the device."""
    g = torch.Generator(device=device).manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab, (n, cfg.batch, cfg.seq + 1), device=device, generator=g)
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


class Trainer:
    """A model, its AdamW and (fp16) its GradScaler, for one precision."""

    def __init__(
        self,
        cfg: GPTConfig,
        device: torch.device,
        precision: str,
        lr: float = 3e-4,
        clip: float = 1.0,
        seed: int = 0,
    ) -> None:
        torch.manual_seed(seed)
        self.cfg, self.device, self.precision, self.clip = cfg, device, precision, clip
        self.model = GPT(cfg).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.dtype = _DTYPES[precision]
        self.scaler: Any = (
            torch.amp.GradScaler(device.type, init_scale=2.0**14) if precision == "fp16" else None
        )

    def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step; ``(loss, pre-clip grad norm)``, both left on the device."""
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, self.cfg.vocab), y.reshape(-1))
        scaler = self.scaler
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(self.opt)  # clip (and measure) the true gradient
        else:
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        if scaler is not None:
            scaler.step(self.opt)  # reads found_inf: a sync of the training's own
            scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach(), norm.detach()


def precisions_for(device: str) -> tuple[str, ...]:
    """fp16 with a GradScaler is a GPU recipe; the CPU runs fp32 and bf16 autocast."""
    return PRECISIONS if device == "cuda" else ("fp32", "bf16")
