"""Healthy synthetic runs across seeds and shapes: which rules warn or go critical.

    .venv/bin/python benchmarks/healthy_sweep.py            # 1728 runs, ~45 s
    .venv/bin/python benchmarks/healthy_sweep.py --seeds 4  # a quicker look

Why: the fault suite's healthy runs are 20 fixed trainings and the real corpus is what
it is; a rule can still cry wolf on shapes neither holds. This replays the engine over a
grid of healthy curves (``tests/rulekit.Run``: an exponential descent to a floor with
log-normal noise) that learn fast, slowly or barely (tau 150, 2000, 8000 steps over
1500), with per-step loss noise from 5 % to 90 %, calm or wild grad norms, and with or
without evaluations every 50 steps (10 % evaluation noise); then over lr schedules
(constant, warm-up + cosine, step decay) with heavy tails (one loss in 200 at 3x, one grad
norm in 200 at 8x, or both); then as other tools log them, every 10 or 50 steps (the
mean loss of those steps, as a Hugging Face Trainer writes it, without timings); then
adversarial healthy shapes that look like faults to a naive rule: a GAN's losses that
never trend down, an RL value loss that jumps whenever the policy changes, a curriculum
that makes the task harder twice, warm restarts of the lr (SGDR) with the loss bumping
up after each. None of them is a fault, so every warning and critical printed is a false
alarm to look at (the issue's bar: no critical in any grid). Prints the counts per grid
and alert id, and one example of each.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from dltop.tui.core.rules import Config, RuleEngine  # noqa: E402
from rulekit import Curve, Run, lr_constant, lr_step, lr_warmup_cosine, run_engine  # noqa: E402

Point = dict[str, Any]


def grid(seeds: int, **axes: tuple[Any, ...]) -> Iterator[tuple[str, Point]]:
    """Every combination of the axes, for each seed, with a label naming it."""
    names = list(axes)
    for seed in range(seeds):
        for values in itertools.product(*axes.values()):
            point = dict(zip(names, values, strict=True), seed=seed)
            yield " ".join(f"{k} {v}" for k, v in point.items()), point


def _log_normal(sigma: float, r: random.Random) -> Callable[[int, float], float]:
    return lambda i, x: x * math.exp(sigma * r.gauss(0, 1))


def _every(rate: float, factor: float, r: random.Random) -> Callable[[int, float], float]:
    return lambda i, x: x * factor if r.random() < rate else x


def curves(seeds: int) -> Iterator[tuple[str, Run, int]]:
    """Fast, slow and barely learning; light to wild noise; with or without evaluations."""
    axes = grid(
        seeds, noise=(0.05, 0.2, 0.5, 0.9), tau=(150.0, 2000.0, 8000.0), gn_noise=(0.3, 0.8),
        eval_every=(0, 50),
    )  # fmt: skip
    for label, p in axes:
        eval_at = _log_normal(0.1, random.Random(p["seed"]))
        yield label, Run(steps=1500, eval_at=eval_at, **p), 1


LRS: dict[str, Curve] = {
    "constant": lr_constant(),
    "warmup_cosine": lr_warmup_cosine(0.1, 100, 3000),
    "step": lr_step(0.1, 1000, 0.1),
}


def schedules_and_tails(seeds: int) -> Iterator[tuple[str, Run, int]]:
    """lr schedules, with occasional outlier losses or grad norms (hard batches)."""
    axes = grid(
        seeds, noise=(0.1, 0.4), tau=(150.0, 1500.0), lr=tuple(LRS),
        tail=("none", "loss", "grad_norm", "both"),
    )  # fmt: skip
    for label, p in axes:
        seed, tail = p["seed"], p.pop("tail")
        loss_at = _every(0.005, 3.0, random.Random(seed * 7 + 1))
        gn_at = _every(0.005, 8.0, random.Random(seed * 11 + 3))
        run = Run(
            steps=3000,
            lr=LRS[p.pop("lr")],
            loss_at=loss_at if tail in ("loss", "both") else None,
            gn_at=gn_at if tail in ("grad_norm", "both") else None,
            eval_every=100,
            eval_at=_log_normal(0.05, random.Random(seed)),
            **p,
        )
        yield label, run, 1


def every_n(records: Iterable[dict[str, Any]], n: int) -> Iterator[dict[str, Any]]:
    """The run as a tool that logs every ``n`` steps writes it: one step record per ``n``
    steps holding their mean loss, no timings, no heartbeats or layer records."""
    losses: list[float] = []
    for rec in records:
        kind = rec.get("kind")
        if kind == "step":
            losses.append(rec["loss"])
            if rec["step"] % n == n - 1:
                out = {k: rec[k] for k in ("kind", "step", "t", "grad_norm", "lr") if k in rec}
                out["loss"] = sum(losses) / len(losses)
                losses = []
                yield out
        elif kind in ("meta", "eval", "event"):
            yield rec


def sparse_logs(seeds: int) -> Iterator[tuple[str, Run, int]]:
    """Logged every 10 or 50 steps, over 5000 steps."""
    axes = grid(
        seeds, noise=(0.05, 0.2, 0.5, 0.9), tau=(150.0, 1000.0, 3000.0), every=(10, 50),
        eval_every=(0, 250),
    )  # fmt: skip
    for label, p in axes:
        every = p.pop("every")
        eval_at = _log_normal(0.05, random.Random(p["seed"]))
        run = Run(steps=5000, eval_phase=False, layers_every=0, eval_at=eval_at, **p)
        yield label, run, every


def _gan(r: random.Random) -> Callable[[int, float], float]:
    """A GAN's generator loss: a level near ln 2 with a slow tug of war, no trend."""
    phase = r.uniform(0, 2 * math.pi)
    return lambda i, x: 0.7 * (1 + 0.15 * math.sin(2 * math.pi * i / 300 + phase)) * (x / 0.2)


def _rl(r: random.Random) -> Callable[[int, float], float]:
    """An RL value loss: it falls, and jumps 3x whenever the policy changes (every ~250
    steps), falling back within ~40 steps."""
    changes = sorted(r.randrange(100, 1500) for _ in range(5))

    def f(i: int, x: float) -> float:
        since = [i - c for c in changes if c <= i]
        bump = 2.0 * math.exp(-since[-1] / 40) if since else 0.0
        return x * (1 + bump)

    return f


def _curriculum(r: random.Random) -> Callable[[int, float], float]:
    """Harder data at steps 500 and 1000: the loss jumps 2.5x and learns again."""

    def f(i: int, x: float) -> float:
        harder = sum(1 for c in (500, 1000) if i >= c)
        since = i - (1000 if i >= 1000 else 500)
        return x * (1 + 1.5 * math.exp(-since / 150)) if harder else x

    return f


def _sgdr(period: int = 300) -> tuple[Curve, Callable[[int, float], float]]:
    """Cosine lr with warm restarts, and the loss bumping 1.5x after each restart."""

    def lr(i: int) -> float:
        return 0.05 * (1 + math.cos(math.pi * (i % period) / period)) + 1e-4

    def loss(i: int, x: float) -> float:
        return x * (1 + 0.5 * math.exp(-(i % period) / 30)) if i >= period else x

    return lr, loss


def adversarial(seeds: int) -> Iterator[tuple[str, Run, int]]:
    """Healthy runs whose losses look like faults: GAN, RL, curriculum, warm restarts."""
    axes = grid(seeds, shape=("gan", "rl", "curriculum", "sgdr"), noise=(0.1, 0.3))
    for label, p in axes:
        r = random.Random(p["seed"])
        shape, noise, seed = p["shape"], p["noise"], p["seed"]
        if shape == "sgdr":
            lr, loss_at = _sgdr()
            yield label, Run(steps=1500, noise=noise, seed=seed, lr=lr, loss_at=loss_at), 1
            continue
        loss_at = {"gan": _gan, "rl": _rl, "curriculum": _curriculum}[shape](r)
        run = Run(steps=1500, noise=noise, seed=seed, loss_at=loss_at)
        if shape == "gan":
            run = Run(
                steps=1500, noise=noise, seed=seed, loss_at=loss_at, tau=1e9, floor=0.2, loss0=0.2
            )
        yield label, run, 1


GRIDS = (
    ("curves", curves),
    ("schedules and tails", schedules_and_tails),
    ("sparse logs", sparse_logs),
    ("adversarial", adversarial),
)


def engine_for(run: Run, every: int) -> RuleEngine:
    """The run through the rules, logged every step or, like other tools, every ``every``."""
    if every == 1:
        return run_engine(run)
    engine = RuleEngine(Config.load())
    engine.feed_many(every_n(run.records(), every))
    engine.finish()
    return engine


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12, help="seeds per grid point (12)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    runs = 0
    for grid_name, make in GRIDS:
        counts: dict[str, Counter[str]] = {"critical": Counter(), "warning": Counter()}
        example: dict[tuple[str, str], str] = {}
        n = 0
        for label, run, every in make(args.seeds):
            n += 1
            engine = engine_for(run, every)
            for a in engine.alerts():
                if a.severity in counts:
                    counts[a.severity][a.id] += 1
                    example.setdefault((a.severity, a.id), f"{label}: {a.message[:120]}")
        runs += n
        print(f"{grid_name}: {n} healthy synthetic runs")
        for sev in ("critical", "warning"):
            ids = ", ".join(f"{k} {v}" for k, v in counts[sev].most_common()) or "none"
            print(f"  {sev:<9} alerts by id: {ids}")
        for (sev, aid), text in sorted(example.items()):
            print(f"    e.g. {sev} {aid}: {text}")
    print(f"{runs} runs in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
