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
import importlib.util
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
    seconds: int  # rough wall time on 2 CPU cores with --fast, torch import included
    slow: bool = True  # the default test run skips slow demos
    # optimizer steps of a whole run: spread over PACE_SECONDS unless --fast (0: not paced,
    # the demo already runs at a human pace, or pacing would hide its fault)
    steps: int = 0


# name, what breaks (for --list), alert id, step budget, seconds (--fast), slow, steps paced
# fmt: off
_TABLE = [
    ("healthy", "nothing: a well-tuned run, dltop stays quiet", None, None, 4, True, 640),
    ("nan", "LR warm-up to a peak far too high: the loss turns NaN", "nan_loss", 300, 4, False, 384),
    ("explode", "2nd data file in mm, not m: gradients explode (clipping hides it)", "grad_explosion", 300, 4, True, 300),
    ("vanishing", "20 stacked sigmoids: gradients vanish before the first layer", "vanishing_grad", 400, 5, True, 512),
    ("dead_units", "LR too high for a ReLU net: the units die and never recover", "dead_units", 400, 5, True, 512),
    ("plateau", "learning rate 1e-6 instead of 1e-3: the loss does not move", "plateau", 400, 4, True, 384),
    ("oscillation", "data sorted by class, not shuffled: the loss saws up and down", "oscillation", 400, 5, True, 600),
    ("overfit", "big net, 128 noisy samples: eval loss climbs, train loss falls", "overfitting", 800, 8, True, 800),
    ("data_bound", "a slow dataset, no workers: the model waits for data", "data_bound", 120, 11, True),
    ("leak", "held-out loss kept with its graph: memory grows every step", "memory_growth", 1600, 30, True),
    ("oom", "batch size doubled until it does not fit: a real out-of-memory", "oom", 40, 7, True, 16),
    ("stall", "a read blocks on a dead storage server: training hangs 70 s", "stall", 200, 75, True),
    ("crash", "batch size hard-coded in a reshape: the last batch crashes", "crash", 100, 4, True, 31),
    ("hf_lr_blowup", "HF Trainer, lr 2.0 instead of 2e-3: the loss blows up (adapter)", "divergence", 200, 14, True, 240),
    ("lightning_overfit", "Lightning, big net on 128 noisy samples: eval loss climbs (adapter)", "overfitting", 300, 16, True, 320),
]
# fmt: on
DEMOS: dict[str, Demo] = {str(row[0]): Demo(*row) for row in _TABLE}  # type: ignore[arg-type]
# demos that train through a framework adapter: demo -> (module it needs, the extra to install)
NEEDS: dict[str, tuple[str, str]] = {
    "hf_lr_blowup": ("transformers", "hf"),
    "lightning_overfit": ("lightning", "lightning"),
}
PACE_SECONDS = 30.0  # a paced demo's training time: long enough to watch it go wrong


class Pacer:
    """Spreads a demo's steps over about :data:`PACE_SECONDS` so a person can watch it.

    Unpaced, most demos finish in 2-4 s: the first thing a newcomer saw was a finished
    run, "elapsed 0:00", and a memory panel without readings (the 1 Hz sampler never
    ran). Called after ``probe.step()``: the wait lands in the step's compute time (as a
    slower model would), never in its data wait, which would read as a data-bound run.
    The schedule is absolute (step i is due at ``start + i * delay``), so the demo's own
    compute is absorbed, not added.
    """

    def __init__(self, delay: float) -> None:
        self.delay = max(0.0, delay)
        self.due: float | None = None

    def __call__(self) -> None:
        if not self.delay:
            return
        now = time.monotonic()
        if self.due is None:
            self.due = now
        self.due += self.delay
        if self.due > now:
            time.sleep(self.due - now)
        else:  # behind (a slow machine, a long step): never sleep to catch up, never race ahead
            self.due = now


def pacer(args: argparse.Namespace) -> Pacer:
    """The demo's pacer: a no-op with ``--fast`` or for demos that are not paced."""
    steps = DEMOS[args.demo].steps
    return Pacer(0.0 if args.fast or not steps else PACE_SECONDS / steps)


def noisy_teacher_data() -> tuple[Any, Any, Any, Any]:
    """The overfitting demos' data: ``(x_train, y_train, x_val, y_val)``, 128 training and
    2048 held-out samples. A random linear "teacher" labels Gaussian inputs into 10
    classes; 25 % of the training labels are then replaced by random ones (label noise)."""
    import torch

    teacher = torch.randn(32, 10)
    x = torch.randn(128 + 2048, 32)
    y = (x @ teacher).argmax(dim=1)
    x_train, y_train = x[:128], y[:128].clone()
    noisy = torch.rand(128) < 0.25
    y_train[noisy] = torch.randint(0, 10, (int(noisy.sum()),))
    return x_train, y_train, x[128:], y[128:]


def missing_framework(name: str) -> str | None:
    """Why demo ``name`` cannot run here, with the extra to install: its framework (see
    :data:`NEEDS`) is not installed; ``None`` when it can. Looked up, never imported."""
    if name not in NEEDS or importlib.util.find_spec(NEEDS[name][0]) is not None:
        return None
    module, extra = NEEDS[name]
    return (
        f"the {name} demo trains with {module}, which is not installed here "
        f"(pip install 'dltop-monitor[{extra}]')"
    )


def parse_args(name: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line every demo accepts: ``--out PATH``, ``--device cpu|cuda``, ``--fast``."""
    demo = DEMOS[name]
    parser = argparse.ArgumentParser(
        prog=f"python -m dltop.demos.{name}", description=f"dltop demo: {demo.breaks}"
    )
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    missing = missing_framework(name)
    if missing is not None:  # `python -m dltop.demos.NAME` run directly: no traceback either
        parser.exit(2, f"{parser.prog}: {missing}\n")
    args.demo = name
    if args.out is None:
        args.out = default_log_path(name)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    return args


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out PATH``, ``--device cpu|cuda``, ``--fast``: what every demo takes, and what
    ``dltop demo`` takes to pass on to it."""
    parser.add_argument(
        "--out", metavar="PATH", help="log file (default: ./dltop-runs/demo-NAME-TIME.jsonl)"
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)"
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help=f"train at full speed (default: spread over ~{PACE_SECONDS:.0f} s so you can watch)",
    )


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
