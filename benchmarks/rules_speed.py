"""How fast the rules engine digests steps, as a ratio to a bare loop over the same records.

    python benchmarks/rules_speed.py [--steps 1000000] [--by-part] [--log FILE]

Prints steps/s for ``RuleEngine.feed`` on a realistic record stream (loss, grad norm,
lr with a step schedule, timings, memory, a layers record every 50 steps, heartbeats,
eval every 500 steps) and, as the anchor measured in the same run, a loop that only
reads the same fields from each record. The target: 10 k steps/s live (far below) and
1 M steps replayed in a few seconds.

``--by-part`` says where the engine's time goes: the per-step path alone (block ends
skipped), each rule's block hook (a clock around its calls), and the block ends' own work
(the shared windows and thresholds: what is left). This is what a faster engine has to
beat: no single part dominates, so a speed-up must change how every part works.

``--log FILE`` takes the records of a real log instead (a rank file of
``benchmarks/ranks.py --keep DIR``, say), decoded before the clock starts.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from typing import Any

from dltop.tui.core.rules import RuleEngine


def records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    t = 0.0
    names = [f"l{i}.weight" for i in range(8)]
    for i in range(n):
        t += 0.05 + 0.005 * r.random()
        lr = 0.1 * (0.1 ** (i // (n // 3 + 1)))
        loss = (2.0 * math.exp(-i / 2000) + 0.2) * math.exp(0.2 * r.gauss(0, 1))
        out.append(
            {
                "kind": "step",
                "step": i,
                "t": t,
                "loss": loss,
                "grad_norm": 1.0 + r.random(),
                "lr": lr,
                "data_time": 0.002 * r.random(),
                "step_time": 0.05,
                "batch_size": 32,
                "mem_allocated": 1_000_000_000 + r.randrange(1_000_000),
                "mem_limit": 80_000_000_000,
            }
        )
        if i % 40 == 0:
            out.append({"kind": "heartbeat", "t": t, "step": i})
        if i % 50 == 0:
            out.append(
                {
                    "kind": "layers",
                    "step": i,
                    "t": t,
                    "names": names,
                    "grad_norm": [0.1 + r.random() for _ in names],
                    "zero_frac": [0.1 * r.random() for _ in names],
                    "no_grad": [],
                }
            )
        if i % 500 == 499:
            out.append(
                {"kind": "eval", "step": i, "t": t, "loss": 2.2 * math.exp(-i / 2000) + 0.25}
            )
    return out


def anchor(recs: list[dict[str, Any]]) -> float:
    t0 = time.perf_counter()
    acc = 0.0
    for rec in recs:
        if rec.get("kind") == "step":
            acc += rec.get("loss", 0.0) + rec.get("grad_norm", 0.0) + rec.get("lr", 0.0)
    return time.perf_counter() - t0


def _timed(recs: list[dict[str, Any]], change: Callable[[RuleEngine], None] | None) -> float:
    """Best of 3 runs of a fresh engine over ``recs``, ``change`` applied to it first."""
    best = math.inf
    for _ in range(3):
        eng = RuleEngine()
        if change is not None:
            change(eng)
        t0 = time.perf_counter()
        eng.feed_many(recs)
        eng.finish()
        best = min(best, time.perf_counter() - t0)
    return best


def by_part(recs: list[dict[str, Any]], steps: int) -> None:
    """The engine's time by part (benchmark only: it patches the engine's private block
    end and hook list, which no caller may do). The per-step path is timed with block
    ends skipped; each rule's block hook by a clock around its calls in one run (best of
    3), so the parts of one run add up and machine noise does not hand one part
    another's time; the block ends' own work is what is left of the whole."""

    def no_block_end(eng: RuleEngine) -> None:
        eng._close_block = eng.blk.clear  # type: ignore[method-assign]

    whole = _timed(recs, None)
    per_step = _timed(recs, no_block_end)
    spent: dict[str, float] = {}
    names = [type(getattr(h, "__self__", h)).__name__ for h in RuleEngine()._block_hooks]
    for _ in range(3):
        eng = RuleEngine()
        clocks = [0.0] * len(names)

        def clocked(
            i: int, hook: Callable[..., None], clocks: list[float] = clocks
        ) -> Callable[..., None]:
            def run(*args: Any) -> None:
                t0 = time.perf_counter()
                hook(*args)
                clocks[i] += time.perf_counter() - t0

            return run

        eng._block_hooks = [clocked(i, h) for i, h in enumerate(eng._block_hooks)]
        eng.feed_many(recs)
        eng.finish()
        for name, sec in zip(names, clocks, strict=True):
            spent[name] = min(spent.get(name, math.inf), sec)
    hooks = sum(spent.values())
    rows = [("per-step path (block ends skipped)", per_step)]
    rows.append(("block ends without the rules' hooks", max(0.0, whole - per_step - hooks)))
    rows += [(f"{name}.on_block", sec) for name, sec in spent.items()]
    print(f"whole engine: {whole:.2f} s = {whole / steps * 1e6:.2f} us/step")
    for label, sec in rows:
        print(f"  {label:<44} {sec / steps * 1e6:6.2f} us/step  {100 * sec / whole:5.1f} %")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--by-part", action="store_true", help="where the engine's time goes")
    p.add_argument("--log", help="a log's records instead of the synthetic stream")
    a = p.parse_args()
    if a.log:
        from dltop.probe.decoding import read_records

        try:
            recs = read_records(a.log)[0]
        except OSError as exc:
            p.error(f"cannot read {a.log}: {exc.strerror or exc}")
        a.steps = max(1, sum(1 for r in recs if r.get("kind") == "step"))
    else:
        recs = records(a.steps)
    if a.by_part:
        by_part(recs, a.steps)
        return
    base = anchor(recs)
    eng = RuleEngine()
    t0, c0 = time.perf_counter(), time.process_time()
    eng.feed_many(recs)
    eng.finish()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"records: {len(recs)}  steps: {a.steps}")
    print(
        f"engine:  {dt:.2f} s wall = {a.steps / dt:,.0f} steps/s; {cpu:.2f} s CPU = {a.steps / cpu:,.0f} steps/s"
    )
    print(f"anchor (read 3 fields per record): {base:.2f} s; engine / anchor = {dt / base:.1f}x")
    print(f"alerts on this healthy stream: {[x.id for x in eng.alerts()]}")


if __name__ == "__main__":
    main()
