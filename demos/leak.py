"""leak: a loss kept with its autograd graph, every step, so memory only grows.

Each step also measures the loss on a fixed held-out batch "to plot later" and appends
it to a Python list. That loss was computed with autograd on (no ``torch.no_grad()``)
and is kept as a tensor (no ``.item()``), so it holds on to its whole graph, including
the activations saved for a backward pass that never comes: about 0.5 MB per step here.
Nothing is ever freed; the process grows until, in a real run, the machine or the GPU
runs out. This demo stops after 30 seconds or 1600 steps, whichever comes first (at
most ~800 MB kept), so it never hurts your machine.

dltop raises ``memory_growth`` from the steady, never pulled-back rise of the process's
resident memory (allocated memory on a GPU); its checklist suggests ``.item()`` /
``.detach()`` for anything you keep, and ``torch.no_grad()`` for evaluation.

    python -m dltop.demos.leak [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("leak")
