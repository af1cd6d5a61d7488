"""crash: a shape bug that only bites on the last, smaller batch of the epoch.

The model flattens its images with ``x.view(BATCH_SIZE, -1)``: the batch size is
hard-coded. The dataset has 2000 images, not a multiple of 64, so the epoch's last
batch holds 16 images; ``view`` happily reshapes them to 64 rows of 196 values, and
the first linear layer fails with "mat1 and mat2 shapes cannot be multiplied". The
exception leaves the ``with Probe(...)`` block, which records it (type, message,
traceback) and re-raises it unchanged, so the script exits with an error like any
crashed training.

dltop shows the ``crash`` alert with the exception, the step it happened at, and a
checklist for shape errors. Fix: ``x.flatten(1)`` (or ``x.view(x.size(0), -1)``).

    python -m dltop.demos.crash [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("crash")
