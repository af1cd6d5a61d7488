"""healthy: a sensible run, so you know what quiet looks like.

A small MLP learns a synthetic classification task with Adam, a cosine learning-rate
schedule and a held-out set evaluated every 64 steps. Nothing is wrong here: dltop must
raise no alert at all. Compare its panels with the broken demos.

    python -m dltop.demos.healthy [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("healthy")
