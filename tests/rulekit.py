"""Synthetic record streams for the rule tests: a healthy noisy run, plus injectable faults.

A ``Run`` describes a training the way the probe would log it (loss falling with
multiplicative noise, grad norm with heavy-ish noise, an lr schedule, timings, memory,
layers records, heartbeats, eval phases); tests tweak one aspect to make the fault they
test and leave the rest healthy, so a rule that fires on the healthy parts fails them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.alerts import Alert

Curve = Callable[[int], float]


def lr_constant(lr: float = 0.1) -> Curve:
    return lambda i: lr


def lr_step(lr: float = 0.1, every: int = 300, gamma: float = 0.1) -> Curve:
    return lambda i: lr * gamma ** (i // every)


def lr_warmup_cosine(lr: float = 0.1, warmup: int = 100, total: int = 1000) -> Curve:
    def f(i: int) -> float:
        if i < warmup:
            return lr * (i + 1) / warmup
        return 0.5 * lr * (1 + math.cos(math.pi * (i - warmup) / max(1, total - warmup)))

    return f


@dataclass
class Run:
    steps: int = 1000
    seed: int = 0
    loss0: float = 2.3  # start level
    floor: float = 0.2  # asymptote
    tau: float = 150.0  # decay time constant, steps
    noise: float = 0.15  # multiplicative noise (log-normal sigma)
    gn0: float | None = 1.0  # None: no grad_norm field (a user logging floats only)
    gn_noise: float = 0.3
    lr: Curve | None = field(default_factory=lr_constant)
    dt: float = 0.05  # seconds per step
    data_share: float = 0.02
    mem: float | None = 2e9  # CUDA allocated bytes (None: no memory fields)
    eval_every: int = 0
    eval_phase: bool = True  # wrap evals in phase events
    eval_seconds: float = 3.0
    layers_every: int = 50
    heartbeat_every: float = 2.0
    # fault hooks: step -> override
    loss_at: Callable[[int, float], float] | None = None
    gn_at: Callable[[int, float], float] | None = None
    loss_scale: float | None = None  # an AMP GradScaler's scale on every step (Probe(scaler=))
    eval_at: Callable[[int, float], float] | None = None
    layers_at: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
    share_at: Callable[[int], float] | None = None
    mem_at: Callable[[int, float], float] | None = None
    pause_at: dict[int, float] = field(default_factory=dict)  # seconds of silence after step
    pause_heartbeats: bool = True
    end: str | None = "ok"  # exit status, None for no exit record
    extra_records: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def healthy_loss(self, i: int) -> float:
        return self.floor + (self.loss0 - self.floor) * math.exp(-i / self.tau)

    def records(self) -> Iterator[dict[str, Any]]:
        r = random.Random(self.seed)
        t = 1_700_000_000.0
        yield {
            "kind": "meta",
            "v": 1,
            "pid": 4242,
            "host": "elsewhere",
            "t": t,
            "devices": [{"type": "cuda"}],
        }
        next_hb = t + self.heartbeat_every
        names = [f"layer{j}.weight" for j in range(4)] + ["head.bias"]
        # time since the previous step's end that the next step_time includes, as the
        # probe measures it (monotonic): pauses and undeclared evals, not declared phases
        carry = 0.0
        for i in range(self.steps):
            step_time = self.dt * (1 + 0.1 * r.random())
            t += step_time
            while next_hb <= t:
                yield {"kind": "heartbeat", "t": next_hb, "step": i - 1}
                next_hb += self.heartbeat_every
            loss = self.healthy_loss(i) * math.exp(self.noise * r.gauss(0, 1))
            if self.loss_at:
                loss = self.loss_at(i, loss)
            gn = (self.gn0 or 1.0) * math.exp(self.gn_noise * r.gauss(0, 1))
            if self.gn_at:
                gn = self.gn_at(i, gn)
            share = self.share_at(i) if self.share_at else self.data_share
            rec: dict[str, Any] = {
                "kind": "step",
                "step": i,
                "t": t,
                "loss": loss,
                "grad_norm": gn,
                "lr": self.lr(i) if self.lr else None,
                "step_time": step_time + carry,
                "data_time": share * step_time,
                "batch_size": 32,
            }
            carry = 0.0
            if self.loss_scale is not None:
                rec["loss_scale"] = self.loss_scale
            if self.gn0 is None:
                del rec["grad_norm"]
            if self.lr is None:
                del rec["lr"]
            if self.mem is not None:
                m = self.mem + r.randrange(1 << 20)
                rec["mem_allocated"] = self.mem_at(i, m) if self.mem_at else m
                rec["mem_limit"] = 80 * (1 << 30)
            yield rec
            if self.layers_every and i % self.layers_every == 0:
                lay = {
                    "kind": "layers",
                    "step": i,
                    "t": t,
                    "names": names,
                    "grad_norm": [0.5 * math.exp(0.2 * r.gauss(0, 1)) for _ in names],
                    "zero_frac": [0.05 * r.random() for _ in names],
                    "no_grad": [],
                }
                yield self.layers_at(i, lay) if self.layers_at else lay
            if self.eval_every and i % self.eval_every == self.eval_every - 1:
                if self.eval_phase:
                    yield {
                        "kind": "event",
                        "type": "phase",
                        "name": "eval",
                        "state": "begin",
                        "t": t,
                        "step": i,
                    }
                t += self.eval_seconds
                if not self.eval_phase:
                    carry += self.eval_seconds
                while next_hb <= t:
                    yield {"kind": "heartbeat", "t": next_hb, "step": i}
                    next_hb += self.heartbeat_every
                ev = self.healthy_loss(i) * 1.1 * math.exp(0.02 * r.gauss(0, 1))
                if self.eval_at:
                    ev = self.eval_at(i, ev)
                yield {"kind": "eval", "step": i, "t": t, "loss": ev}
                if self.eval_phase:
                    yield {
                        "kind": "event",
                        "type": "phase",
                        "name": "eval",
                        "state": "end",
                        "t": t,
                        "step": i,
                    }
            if i in self.pause_at:
                end = t + self.pause_at[i]
                while next_hb <= end:
                    if self.pause_heartbeats:
                        yield {"kind": "heartbeat", "t": next_hb, "step": i}
                    next_hb += self.heartbeat_every
                carry += end - t
                t = end
            yield from self.extra_records.get(i, [])
        if self.end is not None:
            yield {
                "kind": "event",
                "type": "exit",
                "status": self.end,
                "t": t + 0.01,
                "step": self.steps - 1,
            }


def run_engine(run: Run, overrides: dict[str, Any] | None = None) -> RuleEngine:
    eng = RuleEngine(Config.load(None, overrides))
    eng.feed_many(run.records())
    eng.finish()
    return eng


def alerts_of(eng: RuleEngine, alert_id: str) -> list[Alert]:
    return [a for a in eng.alerts() if a.id == alert_id]


def noisy(eng: RuleEngine) -> list[str]:
    """Alerts above info, as 'id@step severity' for readable assertion failures."""
    return [
        f"{a.id}@{a.step} {a.severity}: {a.message}" for a in eng.alerts() if a.severity != "info"
    ]
