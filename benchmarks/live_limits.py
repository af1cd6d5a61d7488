"""What outsiders can make a training hold through its live socket, measured.

Run:  .venv/bin/python benchmarks/live_limits.py [--quick]

Each part is a real training process (``tests/floodkit.py``: a ``Probe`` serving TCP on
loopback, answering commands) with other processes against it:

(a) memory: the training's log holds a full 4 MB backlog; 100 viewers connect and never
    read. Its RSS before, with them, and after 9 MB more records;
(b) descriptors: the training runs with ``RLIMIT_NOFILE`` 1024, holds 100 files and
    opens 8 more at every step (1 ms of work each), first alone, then while 3 processes
    open 3 000 connections each (2 000 with ``--quick``) and hold them: its ``open()``
    failures, the most descriptors it held, its step time, what the server refused, and
    the CPU the probe's socket thread spent meanwhile (the flooders themselves compete
    for the same cores: the step time alone does not separate the two).

Prints one JSON object per part. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from floodkit import Crowd, Training  # noqa: E402

MIB = 1 << 20


def memory(tmp: Path) -> dict[str, object]:
    env = {"XDG_RUNTIME_DIR": str(tmp)}
    training = Training(tmp / "mem.jsonl", env=env)  # loopback, no token: any local user
    crowd = Crowd()
    try:
        training.ask("fill 4500000")
        before = training.ask("measure")
        crowd.silent(training.port, 100)
        crowd.reports()
        time.sleep(2)
        during = training.ask("measure")
        training.ask("fill 9000000")
        time.sleep(1)
        after = training.ask("measure")
    finally:
        crowd.close()
        training.finish()
    return {
        "part": "100 silent viewers, 4 MB backlog",
        "rss_before_mib": round(before["rss"] / MIB, 1),
        "rss_with_viewers_mib": round(during["rss"] / MIB, 1),
        "rss_after_9mb_more_mib": round(after["rss"] / MIB, 1),
        "viewers_served": during["viewers"],
        "refused": during["refused"],
        "records_skipped_for_silent_viewers": after["dropped"],
    }


def flood(tmp: Path, per_process: int) -> dict[str, object]:
    env = {"XDG_RUNTIME_DIR": str(tmp), "DLTOP_TOKEN": "bench-" + "t" * 26}
    training = Training(tmp / "flood.jsonl", nofile=1024, env=env)
    crowd = Crowd()
    try:
        base = training.started["fds"]
        alone = training.ask("load 5 100 8 1")
        cpu0 = training.ask("measure")["server_cpu_s"]
        training.send("load 12 100 8 1")
        for _ in range(3):
            crowd.flood(training.port, per_process, 10)
        flooders = crowd.reports()
        flooded = training.answer()
        measured = training.ask("measure")
    finally:
        crowd.close()
        training.finish()
    return {
        "part": f"3 x {per_process} connections, RLIMIT_NOFILE 1024",
        "descriptors_at_start": base,
        "alone": alone,
        "flooded": flooded,
        "connections_made": sum(r.get("connected", 0) for r in flooders),
        "connects_failed_or_timed_out": sum(r.get("failed", 0) for r in flooders),
        "refused": measured["refused"],
        "server_thread_cpu_s_during_flood": (
            None if cpu0 is None else round(measured["server_cpu_s"] - cpu0, 2)
        ),
        "flood_seconds": 12,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 000 connections per flooder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dltop-limits-", dir="/tmp") as d:
        tmp = Path(d)
        os.chmod(tmp, 0o700)
        print(json.dumps(memory(tmp)), flush=True)
        print(json.dumps(flood(tmp, 2000 if args.quick else 3000)), flush=True)


if __name__ == "__main__":
    main()
