"""Record what dltop answers on every corpus, and compare two recordings one by one.

Why: the rules engine is rewritten (issue 31) and must give the same answers, or each
difference must be a fix or a change said in the note. "The same" means every alert's
id, first and last step, severity, whether it is still active, its evidence, title,
message and checklist, plus the verdict and the status of each log. Wall-clock words are taken out of the status: it
is judged as of an hour after the log's last record, the process gone.

    python benchmarks/answers.py record OUT.json [--demos DIR] [--faults DIR] [--no-sweep]
    python benchmarks/answers.py compare BEFORE.json AFTER.json

Corpora: the public logs of shared/realruns (every file of its manifests), the healthy
sweep (synthetic healthy runs, generated here), and when given the demo logs (``dltop
demo NAME --no-ui --fast --out DIR/NAME.jsonl``) and the fault suite's logs
(``benchmarks/detection.py --keep-logs DIR``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.diagnosis.verdict import verdict
from dltop.tui.core.rules.alerts import Alert
from dltop.tui.core.rules.engine import RuleEngine

HERE = Path(__file__).resolve().parent
REALRUNS = HERE.parents[1] / "shared" / "realruns"


def _plain(value: Any) -> Any:
    """Evidence as JSON that compares exactly: floats by repr, NaN/Inf as strings."""
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else float(repr(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)


def alert_answer(a: Alert) -> dict[str, Any]:
    return {
        "id": a.id,
        "step": a.step,
        "last_step": a.last_step,
        "severity": a.severity,
        "active": a.active,
        "evidence": _plain(a.evidence),
        "title": a.title,
        "message": a.message,
        "checklist": a.checklist,
        "repeat": a.repeat,
    }


def engine_answer(engine: RuleEngine) -> dict[str, Any]:
    now = (engine.last_t or 0.0) + 3600.0
    state = run_state(engine, now=now, pid_alive=False)
    return {
        "alerts": [alert_answer(a) for a in engine.alerts()],
        "status": state.status,
        "verdict": verdict(engine, state, "en"),
    }


def _check(path: Path) -> dict[str, Any]:
    """One source the way ``dltop check`` reads it (every rank of a folder)."""
    from dltop.tui import check_cmd
    from dltop.tui.core.rules.config import Config

    try:
        results, _ = check_cmd.collect(str(path), Config.load(), jobs=1)
    except Exception as exc:  # an unreadable file is an answer too
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out = {}
    for r in results:
        key = Path(r.path).name if len(results) > 1 else "log"
        out[key] = engine_answer(r.engine)
    return out


def realruns() -> Iterator[tuple[str, Path]]:
    for manifest in sorted(REALRUNS.glob("MANIFEST*.tsv")):
        for line in manifest.read_text().splitlines()[1:]:
            rel = line.split("\t")[1].strip() if "\t" in line else ""
            if rel and (REALRUNS / rel).exists():
                yield f"realruns/{rel}", REALRUNS / rel


def logs_in(folder: Path, corpus: str) -> Iterator[tuple[str, Path]]:
    for path in sorted(folder.rglob("*.jsonl")):
        yield f"{corpus}/{path.relative_to(folder)}", path


def sweep() -> Iterator[tuple[str, dict[str, Any]]]:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "tests"))
    import healthy_sweep

    for grid_name, make in healthy_sweep.GRIDS:
        for i, (label, run, every) in enumerate(make(12)):
            engine = healthy_sweep.engine_for(run, every)
            yield f"sweep/{grid_name}/{i:04d} {label}", engine_answer(engine)


def record(args: argparse.Namespace) -> int:
    answers: dict[str, Any] = {}
    t0 = time.perf_counter()
    sources: list[tuple[str, Path]] = list(realruns())
    if args.demos:
        sources += list(logs_in(Path(args.demos), "demos"))
    if args.faults:
        sources += list(logs_in(Path(args.faults), "faults"))
    for i, (name, path) in enumerate(sources):
        answers[name] = _check(path)
        if i % 50 == 0:
            print(f"{i}/{len(sources)} {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if not args.no_sweep:
        for name, answer in sweep():
            answers[name] = {"log": answer}
    Path(args.out).write_text(json.dumps(answers, indent=0, sort_keys=True))
    print(f"{len(answers)} sources in {time.perf_counter() - t0:.0f} s -> {args.out}")
    return 0


def _key(a: dict[str, Any]) -> tuple[Any, ...]:
    return (a["id"], a["step"], a.get("repeat", 0))


def compare(args: argparse.Namespace) -> int:
    before = json.loads(Path(args.before).read_text())
    after = json.loads(Path(args.after).read_text())
    differ = 0
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if b == a:
            continue
        differ += 1
        print(f"== {name}")
        if b is None or a is None:
            print(f"   only in {'after' if b is None else 'before'}")
            continue
        for part in sorted(set(b) | set(a)):
            pb, pa = b.get(part, {}), a.get(part, {})
            if pb == pa:
                continue
            for field in ("status", "verdict", "error"):
                if pb.get(field) != pa.get(field):
                    print(f"   {part} {field}: {pb.get(field)!r} -> {pa.get(field)!r}")
            old = {_key(x): x for x in pb.get("alerts", [])}
            new = {_key(x): x for x in pa.get("alerts", [])}
            for k in sorted(set(old) | set(new), key=str):
                o, n = old.get(k), new.get(k)
                if o == n:
                    continue
                if o is None or n is None:
                    x = n or o
                    assert x is not None
                    sign = "+" if o is None else "-"
                    print(f"   {sign} {x['id']}@{x['step']} {x['severity']}")
                    continue
                for f in ("last_step", "severity", "active", "title", "message", "checklist"):
                    if o.get(f) != n.get(f):
                        print(f"   ~ {k[0]}@{k[1]} {f}: {o.get(f)!r} -> {n.get(f)!r}"[:300])
                if o["evidence"] != n["evidence"]:
                    keys = sorted(
                        set(o["evidence"]) | set(n["evidence"]),
                    )
                    changed = [x for x in keys if o["evidence"].get(x) != n["evidence"].get(x)]
                    print(f"   ~ {k[0]}@{k[1]} evidence: {', '.join(changed)[:200]}")
    print(f"{differ} of {len(set(before) | set(after))} sources differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--demos", help="a folder of demo logs")
    r.add_argument("--faults", help="a folder of fault-suite logs")
    r.add_argument("--no-sweep", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = ap.parse_args()
    return record(args) if args.cmd == "record" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
