"""explode: half-way through, the data switches units and the gradients explode.

A small network predicts a sensor's next reading from its last 16 readings. The
readings come from two files read in order (a time series, so no shuffling): the first
in metres, the second, written after a firmware update, in millimetres. From the
first batch of the second file the inputs are 1000x larger and the gradient norm jumps
by about a million. The loop clips gradients to norm 1.0, so the weights survive and
the loss curve merely bends: without the grad-norm panel you would not see why.

dltop raises ``grad_explosion`` (grad norm measured before clipping, far above its
rolling median); its checklist points at the data (scale, outliers, units), the
learning rate and clipping.

    python -m dltop.demos.explode [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("explode")
