"""nan: a learning-rate warm-up that climbs far past what the model can take.

Plain SGD with momentum warms its learning rate up linearly to a peak of 4.0, several
times what this network tolerates (it diverges from about 2). For the first steps the loss falls nicely;
once the rate crosses the stability edge every update overshoots further than the last,
the weights grow geometrically, the logits overflow and the loss becomes NaN. From then
on every step is NaN: nothing in the loop stops it.

dltop flags ``nan_loss`` on the very step it happens; its checklist points at the
learning rate at that step (the ``lr`` panel shows the warm-up ramp).

    python -m dltop.demos.nan [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("nan")
