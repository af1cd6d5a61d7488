"""oom: the batch size doubles until it no longer fits, and the allocator gives out.

Like a batch-size finder, this run trains 4 steps at each batch size and then doubles
it. Activation memory grows with the batch, and at some size the allocator cannot find
the memory for the next tensor: a real ``torch.OutOfMemoryError`` on a GPU, a real
"DefaultCPUAllocator: can't allocate memory" on the CPU. Nothing is faked: to keep
your machine safe, the demo first caps its own memory (on a GPU with
``torch.cuda.set_per_process_memory_fraction``, on the CPU with an address-space limit,
``resource.RLIMIT_AS``, set ~768 MB above what the process already uses), so the
failure comes early and costs the machine nothing.

The exception leaves the ``with Probe(...)`` block: the probe records it as an OOM with
the memory state (allocator statistics on a GPU, process RSS on the CPU) and re-raises
it, so the script exits with an error like any crashed training. dltop shows the
``oom`` alert; its checklist suggests a smaller batch, gradient accumulation, mixed
precision, activation checkpointing, and looking for tensors kept alive.

    python -m dltop.demos.oom [--out PATH] [--device cpu|cuda]
"""

import resource
import sys

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn

CAP_BYTES = 768 * 2**20  # how much memory the demo allows itself for the training


def cap_memory(device: torch.device) -> None:
    """Make the out-of-memory come early and harmlessly: a limit this process sets on itself."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, CAP_BYTES / total))
        return
    if not sys.platform.startswith("linux"):  # without a working RLIMIT_AS, nothing would stop it
        raise SystemExit("oom: the CPU version needs Linux (RLIMIT_AS); try --device cuda")
    with open("/proc/self/statm") as f:  # first field: address space in use, in pages
        in_use = int(f.read().split()[0]) * resource.getpagesize()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = in_use + CAP_BYTES if hard == resource.RLIM_INFINITY else min(hard, in_use + CAP_BYTES)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main() -> None:
    args = parse_args("oom")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "oom: doubling the batch size every 4 steps under a 768 MB cap until a real allocation fails."
    )

    # A wide layer: its activations, 16 KB per sample, are what grows with the batch.
    model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 10))
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()

    def batches():  # synthetic data; the batch size doubles every 4 steps
        batch_size = 1024
        while True:
            for _ in range(4):
                yield torch.randn(batch_size, 64), torch.randint(0, 10, (batch_size,))
            batch_size *= 2  # BUG: nothing stops it at what fits

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        cap_memory(device)
        for xb, yb in probe.loader(batches()):
            xb, yb = xb.to(device), yb.to(device)
            loss = criterion(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss)
            pace()
    print(f"oom: done, log in {args.out}")  # never reached


if __name__ == "__main__":
    main()
