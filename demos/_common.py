"""What every demo shares: the catalogue, the command line, and a reproducible start.

Kept free of torch at import time on purpose: ``dltop demo --list`` and the viewer's
``demo`` command read the catalogue from here, and the viewer must never load torch.
The demos themselves import torch; :func:`setup` only touches it once a demo runs.

Each catalogue entry says which alert ``dltop check`` must raise on the demo's log and
by which step at the latest (``budget``): the end-to-end tests hold every demo to it,
so the catalogue is the demos' specification, not decoration.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Demo:
    """One demo: what it breaks, the alert it must end with, and how long it takes."""

    name: str
    breaks: str  # one line for `dltop demo --list`
    alert: str | None  # the alert id dltop must raise; None for `healthy` (no alert at all)
    budget: int | None  # the alert must first hold at or before this step
    seconds: int  # rough wall time on 2 CPU cores, torch import included
    slow: bool = True  # the default test run skips slow demos


# name, what breaks (for --list), alert id, step budget, seconds, slow
# fmt: off
_TABLE = [
    ("healthy", "nothing: a well-tuned run, dltop stays quiet", None, None, 4, False),
    ("nan", "LR warm-up to a peak far too high: the loss turns NaN", "nan_loss", 300, 4, False),
    ("explode", "2nd data file in mm, not m: gradients explode (clipping hides it)", "grad_explosion", 300, 4, True),
    ("vanishing", "20 stacked sigmoids: gradients vanish before the first layer", "vanishing_grad", 400, 5, True),
    ("dead_units", "LR too high for a ReLU net: the units die and never recover", "dead_units", 400, 5, True),
    ("plateau", "learning rate 1e-6 instead of 1e-3: the loss does not move", "plateau", 400, 4, True),
    ("oscillation", "data sorted by class, not shuffled: the loss saws up and down", "oscillation", 400, 5, True),
    ("overfit", "big net, 128 noisy samples: eval loss climbs, train loss falls", "overfitting", 800, 8, True),
    ("data_bound", "a slow dataset, no workers: the model waits for data", "data_bound", 120, 11, True),
    ("leak", "held-out loss kept with its graph: memory grows every step", "memory_growth", 1600, 30, True),
    ("oom", "batch size doubled until it does not fit: a real out-of-memory", "oom", 40, 7, True),
    ("stall", "a read blocks on a dead storage server: training hangs 70 s", "stall", 200, 75, True),
    ("crash", "batch size hard-coded in a reshape: the last batch crashes", "crash", 100, 4, False),
]
# fmt: on
DEMOS: dict[str, Demo] = {row[0]: Demo(*row) for row in _TABLE}


def parse_args(name: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line every demo accepts: ``--out PATH`` and ``--device cpu|cuda``."""
    demo = DEMOS[name]
    parser = argparse.ArgumentParser(
        prog=f"python -m dltop.demos.{name}", description=f"dltop demo: {demo.breaks}"
    )
    parser.add_argument(
        "--out", default=None, help="log file (default: ./dltop-runs/demo-NAME-TIME.jsonl)"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = default_log_path(name)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    return args


def default_log_path(name: str, directory: str = "dltop-runs") -> str:
    """``dltop-runs/demo-NAME-YYYYmmdd-HHMMSS.jsonl``, the folder the viewer looks in by default.

    A second run in the same second gets ``-2``, ``-3``...: the probe appends to an
    existing log, and two runs in one file would read as one strange run.
    """
    base = Path(directory) / f"demo-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base.with_suffix(".jsonl"), 1
    while path.exists():
        n += 1
        path = Path(f"{base}-{n}.jsonl")
    return str(path)


def setup(args: argparse.Namespace, seed: int = 0) -> Any:
    """Seed, cap CPU threads (2, or ``DLTOP_DEMO_THREADS``) and return the torch device.

    Capping threads keeps a demo's speed the same on a laptop and on a 64-core box, and
    lets the tests run a demo beside the viewer on a small CI machine.
    """
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(int(os.environ.get("DLTOP_DEMO_THREADS", "2")))
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    return torch.device(args.device)
