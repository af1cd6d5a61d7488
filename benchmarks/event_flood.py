"""A flood of events: the memory the viewer's core and `dltop report` hold for it.

    .venv/bin/python benchmarks/event_flood.py [--events 2000000] [--log-mb 88] [--only a,b]

Issue 29 (3): a socket sending ``note`` events drove the viewer to 1.3 GB in 15 s and
`dltop report` used 514 MB on an 88 MB log of events, because the store kept every event.
Each variant runs in its own fresh interpreter, so its peak RSS (``ru_maxrss``) is its own:

- ``ingest``  the viewer's core: ``--events`` note events (plus 1 000 steps, an exception
              and an exit) fed to a ``RunModel`` in batches of 4 096 freshly decoded
              records, as a socket or file source feeds it; prints the peak RSS, the
              events the store kept and its note
- ``empty``   the same interpreter with the same imports and 1 000 steps, no events: the
              floor the ``ingest`` figure is read against
- ``check``   ``dltop check`` on a ``--log-mb`` log of note events (a child process)
- ``report``  ``dltop report`` on the same log (a child process)

No assertion: the figures are for docs/dev/live.md ("Limits").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

T0 = 1.7e9
BATCH = 4096


def _note(i: int) -> bytes:
    rec = {"kind": "event", "type": "note", "t": T0 + 10 + i * 1e-4, "step": 999,
           "text": f"note number {i} about the run"}  # fmt: skip
    return json.dumps(rec).encode() + b"\n"


def _head() -> bytes:
    meta = {"kind": "meta", "v": 1, "run_id": "flood", "t": T0, "pid": 1, "host": "elsewhere",
            "rank": 0, "world_size": 1}  # fmt: skip
    lines = [json.dumps(meta)]
    lines += [
        json.dumps({"kind": "step", "step": i, "t": T0 + i * 0.01, "loss": 1.0 / (i + 1)})
        for i in range(1000)
    ]
    exc = {"kind": "event", "type": "exception", "t": T0 + 10, "step": 999,
           "exc_type": "ValueError", "message": "handled"}  # fmt: skip
    lines.append(json.dumps(exc))
    return ("\n".join(lines) + "\n").encode()


def _tail() -> bytes:
    return (
        json.dumps({"kind": "event", "type": "exit", "t": T0 + 1e4, "status": "ok"}).encode()
        + b"\n"
    )


def _ingest(events: int) -> dict[str, Any]:
    from dltop.probe.decoding import LineDecoder
    from dltop.tui.core.store.run import RunModel

    model = RunModel("flood")
    dec = LineDecoder()
    model.ingest(dec.feed(_head()))
    t = time.perf_counter()
    done = 0
    while done < events:
        n = min(BATCH, events - done)
        model.ingest(dec.feed(b"".join(_note(done + i) for i in range(n))))
        done += n
    model.ingest(dec.feed(_tail()))
    secs = time.perf_counter() - t
    store = model.store
    kept = len(store.events)
    note = store.event_log.note() if hasattr(store, "event_log") else ""
    return {"events": events, "kept": kept, "note": note, "seconds": round(secs, 2),
            "peak_rss_mb": _rss()}  # fmt: skip


def _rss() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _child_rss(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` and return its own peak RSS (this wrapper's only child)."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(r.returncode, time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True)
    rc, secs, kb = out.stdout.split()
    return {
        "rc": int(rc),
        "seconds": round(float(secs), 2),
        "peak_rss_mb": round(int(kb) / 1024, 1),
    }


def _write_log(path: str, mb: int) -> int:
    n = 0
    with open(path, "wb") as f:
        f.write(_head())
        while f.tell() < mb << 20:
            f.write(b"".join(_note(n + i) for i in range(BATCH)))
            n += BATCH
        f.write(_tail())
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--log-mb", type=int, default=88)
    ap.add_argument("--only", default="empty,ingest,check,report")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:  # a fresh interpreter for one variant
        n = args.events if args.variant == "ingest" else 0
        print(json.dumps(_ingest(n)))
        return
    only = args.only.split(",")
    for v in ("empty", "ingest"):
        if v in only:
            cmd = [sys.executable, __file__, "--variant", v, "--events", str(args.events)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            print(v, out.stdout.strip())
    if "check" in only or "report" in only:
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "notes.jsonl")
            n = _write_log(log, args.log_mb)
            size = os.path.getsize(log) / (1 << 20)
            dltop = [sys.executable, "-m", "dltop.tui"]
            for v in ("check", "report"):
                if v in only:
                    got = _child_rss([*dltop, v, log])
                    print(v, json.dumps({"log_mb": round(size, 1), "note_events": n, **got}))


if __name__ == "__main__":
    main()
