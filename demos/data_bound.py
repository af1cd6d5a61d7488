"""data_bound: the model waits for data most of every step.

Each sample is "read from disk" by a dataset whose ``__getitem__`` takes half a
millisecond (a ``time.sleep`` standing in for opening and decoding a file), and the
DataLoader runs with ``num_workers=0``, so the 64 reads of a batch happen one after
the other in the training process while the model sits idle. The forward and backward
pass take a couple of milliseconds; fetching the batch takes over thirty.

dltop raises ``data_bound`` from the share of each step spent blocked in the loader's
``next()`` (``data_time / step_time``, shown in the timing panel); its checklist
suggests ``num_workers > 0``, ``pin_memory``, caching decoded samples, moving
augmentation to the GPU or a larger model per batch.

    python -m dltop.demos.data_bound [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("data_bound")
