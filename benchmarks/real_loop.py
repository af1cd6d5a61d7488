"""What logging a step costs inside a real training loop: the probe against TensorBoard.

Run:  .venv/bin/python benchmarks/real_loop.py [--steps 200] [--quick]   (~1-2 min)

Why this and not only ``probe_overhead.py`` (a): a tight loop of ``probe.step()`` calls
keeps the probe's code and data in the CPU's caches, and says 4-5 us a call. Between two
calls of a real loop the training has run for tens of milliseconds and evicted them; the
call then costs what it costs a user. The README's cost claim is this figure.

The loop is a small character-level GPT in the shape of nanoGPT (token and position
embeddings, pre-norm attention blocks, AdamW), on random tokens, on the CPU. Each step
trains, takes ``loss.item()`` (every logger needs the float), then logs six scalars with
one logger, the loggers taking turns step by step so each sees the same cache state:

- ``probe``: ``Probe.step(loss=..., lr=..., 4 more)``: the call on the training thread
  (the writer, the system sampler and the socket run on threads of their own);
- ``tensorboard``: ``SummaryWriter.add_scalar`` six times (its event writer thread too);
- ``minimal``: the anchor, a dict, ``json.dumps`` and a buffered ``write``;
- ``none``: nothing, to show the loop's own step time.

Printed per logger: the median and p90 of the time inside the logging call(s), the
median step time, and the ratio of medians against TensorBoard measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

SCALARS = ("loss", "lr", "acc", "tokens_per_s", "grad_scale", "wd")


def _gpt(torch: Any, vocab: int, block: int, width: int, layers: int, heads: int) -> Any:
    """A nanoGPT-shaped model: embeddings, pre-norm causal attention + MLP blocks, a head."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
            self.mlp = nn.Sequential(
                nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
            )
            mask = torch.triu(torch.ones(block, block, dtype=torch.bool), diagonal=1)
            self.register_buffer("mask", mask)

        def forward(self, x: Any) -> Any:
            h = self.ln1(x)
            n = x.shape[1]
            x = x + self.attn(h, h, h, attn_mask=self.mask[:n, :n], need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(block, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, idx: Any, targets: Any) -> Any:
            pos = torch.arange(idx.shape[1])
            x = self.blocks(self.tok(idx) + self.pos(pos))
            logits = self.head(self.ln(x))
            return nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    return GPT()


def _loggers(tmp: str) -> tuple[dict[str, Callable[[int, dict[str, float]], None]], list[Any]]:
    """Each logger as ``log(step, scalars)``, and what to close at the end."""
    from dltop.probe import Probe

    out: dict[str, Callable[[int, dict[str, float]], None]] = {}
    closers: list[Any] = []
    probe = Probe(path=os.path.join(tmp, "probe.jsonl")).start()
    closers.append(probe)
    out["probe"] = lambda i, s: probe.step(**s)
    try:
        from torch.utils.tensorboard import SummaryWriter

        tb = SummaryWriter(log_dir=os.path.join(tmp, "tb"))
        closers.append(tb)

        def tb_log(i: int, s: dict[str, float]) -> None:
            for k, v in s.items():
                tb.add_scalar(k, v, i)

        out["tensorboard"] = tb_log
    except Exception as e:  # tensorboard missing or broken: say so, go on
        print(f"tensorboard skipped ({type(e).__name__})")
    f = open(os.path.join(tmp, "minimal.jsonl"), "w", buffering=1 << 16)  # noqa: SIM115
    closers.append(f)

    def minimal(i: int, s: dict[str, float]) -> None:
        f.write(json.dumps({"step": i, "t": time.time(), **s}) + "\n")

    out["minimal"] = minimal
    out["none"] = lambda i, s: None
    return out, closers


def run(steps: int, width: int, layers: int, batch: int) -> dict[str, dict[str, float]]:
    import torch

    torch.manual_seed(0)
    vocab, block = 65, 64
    model = _gpt(torch, vocab, block, width, layers, heads=4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (batch * 8, block + 1))
    with tempfile.TemporaryDirectory() as tmp:
        loggers, closers = _loggers(tmp)
        names = list(loggers)
        inside: dict[str, list[float]] = {n: [] for n in names}
        whole: dict[str, list[float]] = {n: [] for n in names}
        pc = time.perf_counter
        warm = 3 * len(names)
        for i in range(steps * len(names) + warm):
            name = names[i % len(names)]
            t0 = pc()
            rows = data[(i * batch) % len(data) :][:batch]
            loss = model(rows[:, :-1], rows[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            x = loss.item()
            scalars = {
                "loss": x, "lr": 3e-4, "acc": 1.0 / (1.0 + x), "tokens_per_s": 1e5 + i,
                "grad_scale": 1024.0, "wd": 0.01,
            }  # fmt: skip
            t1 = pc()
            loggers[name](i, scalars)
            t2 = pc()
            if i >= warm:
                inside[name].append(t2 - t1)
                whole[name].append(t2 - t0)
        for c in reversed(closers):
            c.close()
    out = {}
    for n in names:
        xs = sorted(inside[n])
        out[n] = {
            "median_us": 1e6 * statistics.median(xs),
            "p90_us": 1e6 * xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)],
            "step_ms": 1e3 * statistics.median(whole[n]),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="logged steps per logger")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 steps, a tiny model")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.width, args.layers, args.batch = 20, 64, 1, 4
    try:
        import torch  # noqa: F401
    except ImportError:
        print("needs torch (pip install torch==2.13.0)", file=sys.stderr)
        return 2
    res = run(args.steps, args.width, args.layers, args.batch)
    anchor = res.get("tensorboard", {}).get("median_us")
    print(f"{args.steps} steps per logger, six scalars a step, {os.cpu_count()} CPUs")
    print(f"{'logger':12} {'median us':>10} {'p90 us':>10} {'step ms':>8}  vs TensorBoard")
    for name, r in res.items():
        ratio = f"{anchor / r['median_us']:.1f}x cheaper" if anchor and r["median_us"] else "-"
        if name in ("tensorboard", "none"):
            ratio = "-"
        print(f"{name:12} {r['median_us']:10.1f} {r['p90_us']:10.1f} {r['step_ms']:8.1f}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
