"""How long crash diagnosis takes on hostile exception messages, against anchors.

    python benchmarks/crash_match.py [--repeat 5]

A log may be crafted or just odd (a shard file name in a message, a blob pasted into an
exception), and its size must not decide how long `dltop check` or the viewer works.
Each message below goes through the real path, ``crashdiag.diagnose`` on an ``exception``
event with the shipped catalogue (every pattern tried, as for an unknown crash, plus its
cause chain), and is timed next to two anchors measured in the same run on the same
record: decoding its JSONL line (what reading the log costs anyway) and one
``str.find`` of a missing word over the message. Target: under 50 ms for each message.
Before the bounded catalogue, the 256 KB one-word message took minutes (one pattern,
``(?P<what>[\\w ]+) must have the same dtype``, was quadratic).
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import time
from collections.abc import Callable
from typing import Any

from dltop.probe.decoding import decode_line
from dltop.tui.core.rules.crashcatalogue import load_catalogue
from dltop.tui.core.rules.crashdiag import diagnose

KB = 1 << 10


def messages(seed: int = 0) -> dict[str, str]:
    r = random.Random(seed)
    near = "DataLoader worker (pid 1) is killed by signal: x must have the same dtype, but got "
    return {
        "256 KB one word": "a" * (256 * KB),
        "256 KB digits": "1" * (256 * KB),
        "256 KB hex": r.randbytes(128 * KB).hex(),
        "256 KB base64": base64.b64encode(r.randbytes(192 * KB)).decode(),
        "256 KB near-miss": (near * (256 * KB // len(near) + 1))[: 256 * KB],
        # the longest line a log may hold (schema.MAX_LINE) minus the record around it
        "8 MB words": ("lorem ipsum dolor " * (8 * KB * KB // 18))[: 8 * KB * KB - KB],
    }


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    load_catalogue()  # parsed once, as in a real run
    print(f"{'message':<18} {'diagnose':>10} {'decode line':>12} {'str.find':>10}  ratios")
    for name, text in messages().items():
        event = {"kind": "event", "type": "exception", "exc_type": "RuntimeError", "t": 0.0}
        event["message"] = text
        if len(text) < KB * KB:  # a cause too, as a wrapped error records it (within MAX_LINE)
            event["cause"] = {"exc_type": "ValueError", "message": text}
        line = json.dumps(event).encode()
        assert decode_line(line) is not None
        t_diag = best(lambda e=event: diagnose(e), args.repeat)
        t_decode = best(lambda ln=line: decode_line(ln), args.repeat)
        t_find = best(lambda t=text: t.find("Tried to allocate"), args.repeat)
        verdict = "ok" if t_diag < 0.050 else "OVER 50 ms"
        print(
            f"{name:<18} {t_diag * 1e3:8.2f}ms {t_decode * 1e3:10.2f}ms {t_find * 1e3:8.2f}ms"
            f"  x{t_diag / t_decode:.1f} decode, x{t_diag / t_find:.0f} find  {verdict}"
        )


if __name__ == "__main__":
    main()
