"""The compiled build (``DLTOP_COMPILE=1``): the same answers as pure Python, and how much faster.

    .venv/bin/python benchmarks/compiled.py [--venv DIR] [--steps 1000000] [--keep DIR]
                                            [--logs DIR] [--repeat 2] [--quick]

The rules engine (``[tool.dltop] compiled`` in pyproject.toml) can be built with mypyc
(setup.py). Compiled code must not change a single answer, so this runs the same worker in
two interpreters, the pure one (the checkout, this venv) and a venv holding the compiled
wheel (``--venv``, built there when it has none: ~4 min on 2 cores), and compares:

- **answers**: every alert (id, severity, steps, message, evidence to the last float),
  every fact and the run status, on the public training logs of ``../shared/realruns``
  (each as ``dltop check`` reads it), on every run of ``healthy_sweep.py``'s grids (1728
  synthetic curves with spikes, schedules and sparse logging), on 1000 hostile logs of
  ``tests/fuzzkit.py`` (every field of every kind mistyped or out of range: compiled code
  checks the annotated types Python ignores, so an exception in one interpreter only is a
  difference too), on the huge log below and on every ``*.jsonl`` of ``--logs`` (e.g.
  ``detection.py --keep-logs DIR``'s fault logs);
- **speed**: ``dltop check``'s work on replay.py's 1 M-step log in each interpreter, each
  next to a plain msgspec line decode of the same file in the same interpreter (issue 11's
  anchor), best of ``--repeat``.

Exit status 1 when an answer differs (the first differences are printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REALRUNS = ROOT.parent / "shared" / "realruns"


# -- the worker: runs in either interpreter; dltop, msgspec and this repo's own helpers ----
def _answers(engine: Any) -> dict[str, Any]:
    return {
        "alerts": [a.to_json() for a in engine.alerts()],
        "facts": {k: repr(v) for k, v in sorted(engine.facts().items())},
    }


def _check(log: str) -> dict[str, Any]:
    """``dltop check``'s answers on one log, or the exception it raised: compiled code
    checks the annotated types that Python ignores, so a wrong-typed value from a log
    could raise there only."""
    from dltop.tui.check_cmd import collect
    from dltop.tui.core.rules import Config

    try:
        (r,), _ = collect(log, Config())  # what `dltop check LOG` does, another tool's log too
        return {**_answers(r.engine), "status": r.state.status}
    except Exception as exc:
        return {"status": f"raised {type(exc).__name__}: {exc}"}


def worker_answers(out: str, logs: list[str], sweep: bool, fuzz: int) -> None:
    results: dict[str, Any] = {log: _check(log) for log in logs}
    sys.path[:0] = [str(HERE), str(ROOT / "tests")]
    if sweep:
        import healthy_sweep as hs  # noqa: PLC0415 - the grids, for both interpreters alike

        for grid_name, make in hs.GRIDS:
            for label, run, every in make(12):
                results[f"{grid_name}: {label}"] = _answers(hs.engine_for(run, every))
    if fuzz:
        from fuzzkit import hostile_run, write_jsonl  # noqa: PLC0415 - tests/fuzzkit.py

        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(fuzz):  # hostile-but-decodable logs: every field mistyped
                path = write_jsonl(Path(tmp) / f"fuzz-{seed}.jsonl", hostile_run(seed))
                results[f"fuzz seed {seed}"] = _check(str(path))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(results, f, sort_keys=True, default=repr)


def worker_time(log: str, repeat: int) -> None:
    import msgspec
    from dltop.tui.check_file import check_file
    from dltop.tui.core.rules import Config

    def decode() -> None:
        dec = msgspec.json.Decoder().decode
        with open(log, "rb") as f:
            for line in f:
                dec(line)

    def check() -> None:
        check_file(log, Config())

    best = {"decode": float("inf"), "check": float("inf")}
    for _ in range(repeat):
        for name, fn in (("decode", decode), ("check", check)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(json.dumps(best))


def worker_where() -> None:
    import dltop.tui.core.rules.engine as engine

    print(engine.__file__)


# -- the driver ----------------------------------------------------------------------------
def build_venv(venv: Path) -> Path:
    """A venv with the compiled wheel (built from this checkout) and its dependencies."""
    py = venv / "bin" / "python"
    if py.exists():
        return py
    try:
        _build(venv, py)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(
            f"building the compiled venv failed ({' '.join(map(str, exc.cmd[:4]))} ...: exit "
            f"{exc.returncode}); it needs a C compiler and the dev extra's mypy"
        ) from None
    return py


def _build(venv: Path, py: Path) -> None:
    with tempfile.TemporaryDirectory() as wheels:
        env = {**os.environ, "DLTOP_COMPILE": "1"}
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps"]
        subprocess.run([*cmd, "-w", wheels, str(ROOT)], check=True, env=env, cwd=ROOT)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        wheel = next(Path(wheels).glob("*.whl"))
        # with the TensorBoard reader: the corpus holds event files
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[tensorboard]"], check=True)


def run_worker(py: str, *args: str) -> str:
    done = subprocess.run(
        [py, str(Path(__file__)), "--worker", *args],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # never the checkout: its dltop/ must not shadow the wheel's
    )
    if done.returncode:
        raise SystemExit(f"worker failed in {py}:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def compare(pure: dict[str, Any], compiled: dict[str, Any]) -> list[str]:
    diffs = [f"{k}: only in one of them" for k in sorted(set(pure) ^ set(compiled))]
    for key in sorted(set(pure) & set(compiled)):
        for part in ("alerts", "facts", "status"):
            if pure[key].get(part) != compiled[key].get(part):
                diffs.append(f"{key}: {part} differ")
    return diffs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        mode, *rest = argv[1:]
        if mode == "answers":
            out, sweep, fuzz, *logs = rest
            worker_answers(out, logs, sweep == "1", int(fuzz))
        elif mode == "time":
            worker_time(rest[0], int(rest[1]))
        else:
            worker_where()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=os.path.join(tempfile.gettempdir(), "dltop-compiled"))
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--keep", default="", help="write/reuse the huge log in this directory")
    ap.add_argument("--logs", default="", help="also compare every *.jsonl in this directory")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="200 k steps, realruns only")
    args = ap.parse_args(argv)
    steps = 200_000 if args.quick else args.steps
    compiled_py = str(build_venv(Path(args.venv)))
    pure_py = sys.executable
    where = {py: run_worker(py, "where") for py in (pure_py, compiled_py)}
    if not where[compiled_py].endswith(".so") or where[pure_py].endswith(".so"):
        raise SystemExit(f"not a pure/compiled pair: {where}")
    print(f"pure:     {where[pure_py]}\ncompiled: {where[compiled_py]}")
    sys.path.insert(0, str(HERE))
    from realruns import manifest  # noqa: PLC0415
    from replay import generate_log  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(args.keep or tmp, f"bench-{steps}.jsonl")
        if not os.path.exists(big):
            generate_log(big, steps)
        logs = [str(REALRUNS / f) for _, f in manifest(REALRUNS)] if REALRUNS.is_dir() else []
        if args.logs:
            logs += sorted(str(p) for p in Path(args.logs).glob("*.jsonl"))
        logs.append(big)
        sweep = "0" if args.quick else "1"
        fuzz = 50 if args.quick else 1000
        got = {}
        for py in (pure_py, compiled_py):
            out = os.path.join(tmp, f"answers-{len(got)}.json")
            t0 = time.perf_counter()
            run_worker(py, "answers", out, sweep, str(fuzz), *logs)
            print(
                f"answers from {'compiled' if py == compiled_py else 'pure'} in {time.perf_counter() - t0:.1f} s"
            )
            with open(out, encoding="utf-8") as f:
                got[py] = json.load(f)
        diffs = compare(got[pure_py], got[compiled_py])
        n_alerts = sum(len(v["alerts"]) for v in got[pure_py].values())
        print(
            f"{len(got[pure_py])} runs compared ({len(logs)} logs"
            f"{', healthy_sweep grids' if sweep == '1' else ''}, {fuzz} fuzzed logs; "
            f"{n_alerts} alerts): {len(diffs)} differ"
        )
        for d in diffs[:20]:
            print("  " + d)
        for py, name in ((pure_py, "pure"), (compiled_py, "compiled")):
            raised = [
                k for k, v in got[py].items() if str(v.get("status", "")).startswith("raised")
            ]
            print(f"  {name}: {len(raised)} raised" + (f" (first: {raised[0]})" if raised else ""))
        times = {
            py: json.loads(run_worker(py, "time", big, str(args.repeat)))
            for py in (pure_py, compiled_py)
        }
    p, c = times[pure_py], times[compiled_py]
    print(
        f"\n{steps} steps, best of {args.repeat} (decode: a plain msgspec line loop, same interpreter)"
    )
    print(
        f"  pure      check {p['check']:6.2f} s  = {p['check'] / p['decode']:4.1f}x its decode ({p['decode']:.2f} s)"
    )
    print(
        f"  compiled  check {c['check']:6.2f} s  = {c['check'] / c['decode']:4.1f}x its decode ({c['decode']:.2f} s)"
    )
    print(
        f"  compiled / pure: {c['check'] / p['check']:.2f}x the time (target for check: <= 3x the decode)"
    )
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
