"""dead_units: a learning rate so large that the first updates kill the ReLUs.

A ReLU unit whose pre-activation is negative for every input outputs zero and gets
exactly zero gradient, so nothing can ever revive it. Here SGD with momentum 0.9 starts
at a learning rate of 0.5 with no warm-up (an effective step ten times larger): the
loss first falls, then oversized updates throw the biases far negative, the hidden
units go silent one after the other, and within a few hundred steps the loss is back
at chance level for good while the optimizer keeps running.

dltop raises ``dead_units`` from the per-layer share of exactly-zero gradient
elements (above 70 % for several checks while the loss is not improving); its
checklist suggests a lower learning rate or a warm-up, LeakyReLU/GELU, and checking the
initialization and input scaling.

    python -m dltop.demos.dead_units [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("dead_units")
