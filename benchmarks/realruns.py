"""How the diagnosis reads real runs: ``dltop check --json`` over every file in
shared/realruns (other people's Hugging Face, Lightning and TensorBoard logs).

Prints, per kind: files read, files with any critical alert, with any warning, unreadable
ones (exit 3), and the most common alert ids (counted once per file). The runs carry no
labels, so this is no accuracy figure: it shows how loud the rules are on real, sparse logs.

    .venv/bin/python benchmarks/realruns.py [REALRUNS_DIR] [--top N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

from dltop.tui import cli

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "realruns"
KINDS = ("hf", "lightning", "tensorboard")


def check(path: Path) -> tuple[int, dict[str, object]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", str(path), "--json"])
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        return code, {"error": err.getvalue().strip()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--top", type=int, default=6)
    args = ap.parse_args()
    if not args.root.is_dir():
        print(f"no realruns folder at {args.root}", file=sys.stderr)
        return 2
    print(
        f"{'kind':<12} {'files':>5} {'critical':>8} {'warning':>8} {'exit3':>5} {'s':>5}  top alert ids (files)"
    )
    for kind in KINDS:
        files = sorted((args.root / kind).iterdir()) if (args.root / kind).is_dir() else []
        crit = warn = unreadable = 0
        ids: Counter[str] = Counter()
        t0 = time.perf_counter()
        for f in files:
            code, out = check(f)
            alerts = out.get("alerts") or []
            assert isinstance(alerts, list)
            if code == 3:
                unreadable += 1
            if any(a["severity"] == "critical" for a in alerts):
                crit += 1
            if any(a["severity"] == "warning" for a in alerts):
                warn += 1
            ids.update({f"{a['id']}:{a['severity'][0]}" for a in alerts})
        took = time.perf_counter() - t0
        top = ", ".join(f"{i} {n}" for i, n in ids.most_common(args.top))
        print(f"{kind:<12} {len(files):>5} {crit:>8} {warn:>8} {unreadable:>5} {took:>5.1f}  {top}")
    print(
        "(alert ids as id:severity initial, i info / w warning / c critical; each counted once per file)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
