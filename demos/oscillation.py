"""oscillation: the training data is sorted by class and never shuffled.

The dataset was built class by class (all the 0s, then all the 1s, ...) and the
DataLoader keeps that order (``shuffle=False``). For twenty batches in a row the model
sees a single class, learns to answer it for everything, and the loss drops towards
zero; then the next class arrives, every prediction is wrong, and the loss jumps back
up. The curve saws up and down for the whole run and never settles, because each class
is forgotten while the next one is learned.

dltop raises ``oscillation`` when the windowed loss keeps swinging by more than a few
percent of its level (well above the batch-to-batch noise) with no net progress; its
checklist asks about shuffling, the learning rate and the batch size.

    python -m dltop.demos.oscillation [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("oscillation")
