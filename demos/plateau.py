"""plateau: a learning rate a thousand times too small, so the loss never moves.

The optimizer is Adam with ``lr=1e-6`` where ``1e-3`` was meant (a typo in an exponent
is all it takes). Every update is real but a thousand times too small: the loss sits at
its starting value, minute after minute, and nothing else looks wrong — no NaN, no
spike, healthy gradients. Without a monitor this run burns its whole budget.

dltop raises ``plateau`` when the windowed median loss has improved by less than 0.1 %
for several windows in a row while the learning rate is positive; its checklist shows
the learning rate and suggests an LR range test.

    python -m dltop.demos.plateau [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("plateau")
