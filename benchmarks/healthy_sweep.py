"""Healthy synthetic runs across seeds and shapes: which rules warn or go critical.

    .venv/bin/python benchmarks/healthy_sweep.py            # 576 runs, ~10 s
    .venv/bin/python benchmarks/healthy_sweep.py --seeds 4  # a quicker look

Why: the fault suite's healthy runs are 20 fixed trainings and the real corpus is what
it is; a rule can still cry wolf on shapes neither holds. This replays the engine over a
grid of healthy curves (``tests/rulekit.Run``: an exponential descent to a floor with
log-normal noise) that learn fast, slowly or barely (tau 150, 2000, 8000 steps over
1500), with per-step loss noise from 5 % to 90 %, calm or wild grad norms, and with or
without evaluations every 50 steps (10 % evaluation noise). None of them is a fault, so
every warning and critical printed is a false alarm to look at. Prints the counts per
alert id and one example of each.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from rulekit import Run, run_engine  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12)
    args = ap.parse_args()
    counts: dict[str, Counter[str]] = {"critical": Counter(), "warning": Counter()}
    example: dict[tuple[str, str], str] = {}
    runs = 0
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        for noise in (0.05, 0.2, 0.5, 0.9):
            for tau in (150.0, 2000.0, 8000.0):
                for gn_noise in (0.3, 0.8):
                    for every in (0, 50):
                        r = random.Random(seed)
                        run = Run(
                            steps=1500,
                            seed=seed,
                            noise=noise,
                            tau=tau,
                            gn_noise=gn_noise,
                            eval_every=every,
                            eval_at=lambda i, x, r=r: x * math.exp(0.1 * r.gauss(0, 1)),
                        )
                        runs += 1
                        for a in run_engine(run).alerts():
                            if a.severity in counts:
                                counts[a.severity][a.id] += 1
                                example.setdefault(
                                    (a.severity, a.id),
                                    f"seed {seed} noise {noise} tau {tau:g} gn_noise {gn_noise} "
                                    f"eval_every {every}: {a.message[:120]}",
                                )
    took = time.perf_counter() - t0
    print(f"{runs} healthy synthetic runs in {took:.1f} s")
    for sev in ("critical", "warning"):
        ids = ", ".join(f"{k} {v}" for k, v in counts[sev].most_common()) or "none"
        print(f"{sev:<9} alerts by id: {ids}")
    for (sev, aid), text in sorted(example.items()):
        print(f"  e.g. {sev} {aid}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
