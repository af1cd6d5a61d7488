"""vanishing: twenty sigmoid layers stacked without normalization or skip connections.

Backpropagation multiplies the gradient by each layer's weights and by the sigmoid's
slope, which is at most 0.25. Through twenty layers the signal that reaches the first
layers is many orders of magnitude smaller than at the last: the early layers barely
move, and the loss stalls near chance level.

dltop raises ``vanishing_grad`` from the per-layer gradient norms (first/last ratio far
below 1e-3 while the loss is not improving); its checklist suggests ReLU-family
activations, normalization layers, residual connections, or a shallower net.

    python -m dltop.demos.vanishing [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("vanishing")
