"""Detection benchmark: the whole labelled fault suite through ``dltop check``.

    python benchmarks/detection.py                 # every scenario, every seed, 2 jobs
    python benchmarks/detection.py --quick         # the fast subset, first seed only
    python benchmarks/detection.py --only lr_jump --keep-logs /tmp/logs --jobs 1

Prints one row per fault scenario (runs, detected, correct id, timely, the alert found
and its delay from onset in steps, the first loud alert when it was another one), one
row per healthy scenario (runs with a warning / a critical), and the totals against
the targets of issue 3: >= 95 % of fault runs correct, <= 5 % of healthy runs with any
warning, <= 2 % with a critical alert. Trainings are real tiny CPU trainings (see
``tests/faults/scenarios.py``); at most ``--jobs`` run at once, one thread each.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.harness import RunResult, plan, run_suite  # noqa: E402
from tests.faults.scenarios import SCENARIOS  # noqa: E402

TARGET_CORRECT, TARGET_WARN, TARGET_CRIT = 0.95, 0.05, 0.02


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:5.1f} %" if d else "    - "


def _lat(results: list[RunResult]) -> str:
    """Steps from onset to the raise, per seed; a stall also shows the seconds waited."""
    out = []
    for r in results:
        if r.latency is None:
            continue
        secs = r.waited.get(r.matched or "") if r.matched == "stall" else None
        out.append(f"{r.latency}" + (f" ({secs:.1f}s)" if secs is not None else ""))
    return ",".join(out) if out else "-"


def report(results: list[RunResult], wall_s: float) -> str:
    by: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by[r.scenario].append(r)
    lines = [
        f"{'fault scenario':<22} {'runs':>4} {'detected':>8} {'correct':>7} {'timely':>6}  "
        f"{'right alert found':<32} {'raised-onset':<14} {'budget':>6}  other alerts",
    ]
    faults = [r for r in results if not r.healthy]
    healthy = [r for r in results if r.healthy]
    for name, rs in by.items():
        sc = SCENARIOS[name]
        if sc.healthy:
            continue
        found = ",".join(sorted({r.matched for r in rs if r.matched})) or "-"
        others = sorted(
            {a.split("(")[0] for r in rs for a in r.loud if a.split("(")[0] not in sc.expected}
        )
        others += [f"{e} before injection" for r in rs for e in r.early]
        errs = [r.error for r in rs if r.error]
        lines.append(
            f"{name:<22} {len(rs):>4} {sum(r.detected for r in rs):>8} {sum(r.correct for r in rs):>7}"
            f" {sum(r.timely for r in rs):>6}  {found:<32} {_lat(rs):<14} {sc.budget:>6}  "
            + ",".join(others)
            + (f"  ERROR: {errs[0]}" if errs else "")
        )
    lines += [
        "",
        "healthy scenario                          runs  any warning  any critical  alerts",
    ]
    for name, rs in by.items():
        if not SCENARIOS[name].healthy:
            continue
        alerts = sorted({a.split("@")[0] for r in rs for a in r.loud})
        errs = [r.error for r in rs if r.error]
        lines.append(
            f"{name:<41} {len(rs):>4}  {sum(r.any_warning for r in rs):>11}  {sum(r.any_critical for r in rs):>12}"
            f"  {','.join(alerts)}" + (f"  ERROR: {errs[0]}" if errs else "")
        )
    nf, nh = len(faults), len(healthy)
    correct = sum(r.correct for r in faults)
    timely = sum(r.timely for r in faults)
    warn = sum(r.any_warning or r.any_critical for r in healthy)
    crit = sum(r.any_critical for r in healthy)
    errors = sum(1 for r in results if r.error)
    rerun = sum(r.rerun for r in results)
    lines += [
        "",
        f"fault runs: {nf}   detected {_pct(sum(r.detected for r in faults), nf)}   "
        f"correct id {_pct(correct, nf)} (target >= {TARGET_CORRECT:.0%})   "
        f"correct and within budget {_pct(timely, nf)}",
        f"healthy runs: {nh}   with any warning or critical {_pct(warn, nh)} (target <= {TARGET_WARN:.0%})   "
        f"with a critical {_pct(crit, nh)} (target <= {TARGET_CRIT:.0%})",
        f"harness errors: {errors}   trained again after the forkserver lost their exit "
        f"status: {rerun}   wall time {wall_s:.0f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the fast subset, first seed of each")
    p.add_argument("--jobs", type=int, default=2, help="trainings at once (default 2)")
    p.add_argument("--keep-logs", metavar="DIR", help="write the logs here and keep them")
    p.add_argument("--only", metavar="NAME", action="append", help="one scenario (repeatable)")
    p.add_argument("--seeds", type=int, help="use only the first N seeds of each scenario")
    p.add_argument(
        "--engine-api",
        action="store_true",
        help="diagnose through the RuleEngine API, not `dltop check`",
    )
    p.add_argument(
        "--fresh", action="store_true", help="a new interpreter per training (no forkserver)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="one line per run as it ends")
    args = p.parse_args(argv)
    unknown = [n for n in args.only or [] if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}")
    pairs = plan(args.only, quick=args.quick, seeds=args.seeds)

    def progress(r: RunResult) -> None:
        if not args.verbose:
            return
        verdict = "ok" if r.ok and (r.healthy or r.timely) else ("LATE" if r.ok else "MISS")
        verdict = f"ERROR {r.error}" if r.error else verdict
        timing = ""
        if r.latency is not None and r.held_latency is not None:
            timing = f"onset {r.label.get('onset')} held{r.held_latency:+} raised{r.latency:+}  "
        alerts = " ".join(r.loud) or "no alert"
        print(
            f"  {r.scenario}-s{r.seed}: {r.wall_s:.1f} s  {alerts}  {timing}{verdict}", flush=True
        )

    print(f"running {len(pairs)} trainings, {args.jobs} at a time ...", flush=True)
    t0 = time.perf_counter()
    results = run_suite(
        pairs,
        jobs=args.jobs,
        log_dir=args.keep_logs,
        progress=progress,
        api=args.engine_api,
        fresh=args.fresh,
    )
    print(report(results, time.perf_counter() - t0))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
