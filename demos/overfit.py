"""overfit: a big network memorizes a tiny, noisy training set.

The training set has only 128 samples, a quarter of them with wrong labels, and the
model has ~280 k parameters. Training loss keeps falling towards zero as the network
memorizes every sample, label noise included; the loss on held-out data, evaluated
every 20 steps, bottoms out early and then climbs. This is what an evaluation set is for:
the training curve alone looks perfect.

dltop raises ``overfitting`` when the eval loss has stopped improving for several
evaluations while the training loss still falls and the gap widens; its checklist
suggests early stopping at the best eval step, more data or augmentation, weight
decay/dropout, or a smaller model.

    python -m dltop.demos.overfit [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("overfit")
