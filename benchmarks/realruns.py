"""How the diagnosis reads real runs: ``dltop check --json`` over every file in
shared/realruns (other people's Hugging Face, Lightning and TensorBoard logs, every
``MANIFEST*.tsv``), scored against labels given by eye before dltop judged them (every
``realruns_labels*.tsv`` beside this script).

Prints, per kind: files read, files with any critical alert, with any warning, unreadable
ones (exit 3), and the most common alert ids (counted once per file); then, per label,
how many runs dltop names, the share of healthy runs with any warning and with any
critical (targets: <= 5 % and <= 2 %), labelled faults named (target >= 90 %), and every
disagreement with its evidence, so that each one is looked at: either the rule is wrong
or the label is (docs/realruns.md says which, and why).

    .venv/bin/python benchmarks/realruns.py [REALRUNS_DIR] [--top N] [--quiet]
        [--answers FILE.json]

A fault counts as **named only at warning or above** (the severity policy in
docs/alerts.md: a fault that leaves the run broken is at least a warning; users act on
warnings). Faults whose right alert came at information only are counted and listed
apart, as misses. What "named" means per label:
  overfitting -> overfitting; diverged -> divergence or loss_spike; nan -> nan_loss,
  nan_grad or nan_metric; plateau -> plateau; collapsed -> loss_collapsed, dead_units,
  plateau, nan_loss, nan_grad or metric_mismatch;
  healthy -> no warning and no critical; unclear -> not scored.
``--answers`` writes every file's alerts (id, severity, step) and status as JSON: two
such files, before and after a change, say exactly what it changed.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from dltop.tui import cli

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parents[1] / "shared" / "realruns"
LABELS_GLOB = "realruns_labels*.tsv"
KINDS = ("hf", "lightning", "tensorboard")
NAMED_BY: dict[str, frozenset[str]] = {
    "overfitting": frozenset({"overfitting"}),
    "diverged": frozenset({"divergence", "loss_spike"}),
    "nan": frozenset({"nan_loss", "nan_grad", "nan_metric"}),
    "plateau": frozenset({"plateau"}),
    "collapsed": frozenset(
        {"loss_collapsed", "dead_units", "plateau", "nan_loss", "nan_grad", "metric_mismatch"}
    ),
}
LOUD = ("warning", "critical")
TARGET_WARN, TARGET_CRIT, TARGET_NAMED = 0.05, 0.02, 0.90


def check(path: Path) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", str(path), "--json"])
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        return code, {"error": err.getvalue().strip()}


def label_files(folder: Path = HERE) -> list[Path]:
    """Every labels file (one per labelling round), oldest first."""
    return sorted(folder.glob(LABELS_GLOB))


def read_labels(paths: list[Path] | None = None) -> dict[str, tuple[str, str]]:
    """{file: (label, reason)} from every labels file (``#`` lines are comments)."""
    out: dict[str, tuple[str, str]] = {}
    for path in label_files() if paths is None else paths:
        with open(path, encoding="utf-8") as f:
            for row in csv.reader((ln for ln in f if not ln.startswith("#")), delimiter="\t"):
                if len(row) >= 3:
                    out[row[0]] = (row[1], row[2])
    return out


def manifests(root: Path) -> list[Path]:
    """Every ``MANIFEST*.tsv`` of the corpus (the first 271 runs, then each addition)."""
    return sorted(root.glob("MANIFEST*.tsv"))


def manifest(root: Path) -> list[tuple[str, str]]:
    """(kind, file) of every run in the corpus, from all its manifests."""
    out: list[tuple[str, str]] = []
    for m in manifests(root):
        with open(m, encoding="utf-8") as f:
            out += [(r["kind"], r["file"]) for r in csv.DictReader(f, delimiter="\t")]
    return out


def named(label: str, alerts: list[dict[str, Any]], loud_only: bool = True) -> bool:
    """Healthy: no warning and no critical. A fault: an alert of its ids, at warning or
    above (``loud_only=False``: at any severity, information included)."""
    if label == "healthy":
        return not any(a["severity"] in LOUD for a in alerts)
    return any(
        a["id"] in NAMED_BY[label] and (a["severity"] in LOUD or not loud_only) for a in alerts
    )


def _evidence(alerts: list[dict[str, Any]]) -> str:
    shown = [a for a in alerts if a["severity"] in LOUD] or alerts
    if not shown:
        return "no alert"
    return "; ".join(
        f"{a['id']}({a['severity'][0]})@{a.get('step')}: {str(a.get('message', ''))[:110]}"
        for a in shown[:3]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--quiet", action="store_true", help="totals only, no disagreement list")
    ap.add_argument("--answers", type=Path, help="write every file's alerts and status as JSON")
    args = ap.parse_args()
    if not manifests(args.root):
        print(f"no realruns corpus (MANIFEST*.tsv) at {args.root}", file=sys.stderr)
        return 2
    labels = read_labels()
    results: dict[str, tuple[str, int, list[dict[str, Any]]]] = {}
    answers: dict[str, Any] = {}
    t0 = time.perf_counter()
    for kind, file in manifest(args.root):
        code, out = check(args.root / file)
        alerts = out.get("alerts") or []
        results[file] = (kind, code, alerts if isinstance(alerts, list) else [])
        answers[file] = {
            "exit": code,
            "status": out.get("status"),
            "verdict": out.get("verdict"),
            "alerts": [[a["id"], a["severity"], a.get("step")] for a in results[file][2]],
        }
    took = time.perf_counter() - t0
    if args.answers:
        args.answers.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")

    print(f"{len(results)} runs checked in {took:.1f} s")
    print(
        f"{'kind':<12} {'files':>5} {'critical':>8} {'warning':>8} {'exit3':>5}  top alert ids (files)"
    )
    for kind in KINDS:
        rows = [r for r in results.values() if r[0] == kind]
        ids: Counter[str] = Counter()
        for _, _, alerts in rows:
            ids.update({f"{a['id']}:{a['severity'][0]}" for a in alerts})
        crit = sum(any(a["severity"] == "critical" for a in al) for _, _, al in rows)
        warn = sum(any(a["severity"] == "warning" for a in al) for _, _, al in rows)
        bad = sum(code == 3 for _, code, _ in rows)
        top = ", ".join(f"{i} {n}" for i, n in ids.most_common(args.top))
        print(f"{kind:<12} {len(rows):>5} {crit:>8} {warn:>8} {bad:>5}  {top}")

    by_label: dict[str, list[str]] = defaultdict(list)
    for file in results:
        by_label[labels.get(file, ("unlabelled", ""))[0]].append(file)
    print(f"\n{'label':<12} {'runs':>5} {'named':>6}")
    disagreements: list[str] = []
    info_only: list[str] = []
    faults = faults_named = 0
    for label in sorted(by_label, key=lambda x: (x != "healthy", x)):
        files = by_label[label]
        if label not in NAMED_BY and label != "healthy":
            print(f"{label:<12} {len(files):>5} {'-':>6}  (not scored)")
            continue
        ok = [f for f in files if named(label, results[f][2])]
        quiet = [f for f in files if f not in ok and named(label, results[f][2], loud_only=False)]
        extra = f"  (+{len(quiet)} named at information only: misses)" if quiet else ""
        print(f"{label:<12} {len(files):>5} {len(ok):>6}{extra}")
        if label != "healthy":
            faults += len(files)
            faults_named += len(ok)
        for f in quiet:
            info_only.append(
                f"  {label:<11} {f[:90]}\n      label: {labels[f][1][:150]}\n"
                f"      dltop: {_evidence(results[f][2])}"
            )
        for f in files:
            if f not in ok and f not in quiet:
                disagreements.append(
                    f"  {label:<11} {f[:90]}\n"
                    f"      label: {labels[f][1][:150]}\n      dltop: {_evidence(results[f][2])}"
                )
    healthy = by_label.get("healthy", [])
    if healthy:
        warn = sum(any(a["severity"] in LOUD for a in results[f][2]) for f in healthy)
        crit = sum(any(a["severity"] == "critical" for a in results[f][2]) for f in healthy)
        print(
            f"healthy runs with any warning or critical: {warn}/{len(healthy)} = "
            f"{100 * warn / len(healthy):.1f} % (target <= {100 * TARGET_WARN:.0f} %); "
            f"with a critical: {crit}/{len(healthy)} = {100 * crit / len(healthy):.1f} % "
            f"(target <= {100 * TARGET_CRIT:.0f} %)"
        )
        infos: Counter[str] = Counter()
        for f in healthy:
            infos.update({a["id"] for a in results[f][2] if a["severity"] == "info"})
        quiet = sum(not results[f][2] for f in healthy)
        print(
            f"healthy runs with no alert at all: {quiet}/{len(healthy)}; with information, by id: "
            + (", ".join(f"{i} {n}" for i, n in infos.most_common()) or "none")
        )
    if faults:
        print(
            f"labelled faults named: {faults_named}/{faults} = {100 * faults_named / faults:.1f} % "
            f"(target >= {100 * TARGET_NAMED:.0f} %)"
        )
        print(f"labelled faults named only at information (misses): {len(info_only)}")
    if disagreements and not args.quiet:
        print(f"\n{len(disagreements)} disagreements:")
        print("\n".join(disagreements))
    if info_only and not args.quiet:
        print(f"\n{len(info_only)} faults named at information only:")
        print("\n".join(info_only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
