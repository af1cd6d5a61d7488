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

    python -m dltop.demos.oom [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("oom")
