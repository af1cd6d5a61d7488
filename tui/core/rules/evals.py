"""What an evaluation record says about the eval loss, read once for every rule.

Why here: the overfitting rule judges each evaluation set on its own history, and the
plateau rule must know whether the eval loss still improves before it calls a run "not
learning" (a fine-tune whose per-100-step train loss is noise around 1.3 while its eval
loss falls 6 % is learning). Both read evaluations the same way, from this module.
"""

from __future__ import annotations

from collections import deque

from ....probe.schema import Record, as_float

MAX_EVAL_SETS = 8  # evaluation sets followed (the first seen); a record's others are ignored
MAX_SET_NAME = 200  # characters of a set's name kept (it is a key from the log: any length)


def eval_losses(rec: Record) -> list[tuple[str, float]]:
    """The eval losses of a record, by evaluation set: ``loss``; or, without one, every
    ``<set>_loss`` (a Hugging Face Trainer with several eval datasets logs
    ``eval_<set>_loss``, a probe user may call ``probe.eval(val_loss=..., test_loss=...)``).

    With a ``loss`` the ``*_loss`` fields are its parts (a VAE's ``kl_loss`` rises by
    design), never sets of their own."""
    loss = rec.get("loss")
    if loss is not None:
        f = as_float(loss)
        return [("loss", f)] if f is not None and f - f == 0.0 else []
    out: list[tuple[str, float]] = []
    for k, v in rec.items():
        if isinstance(k, str) and k.endswith("_loss"):
            f = as_float(v)
            if f is not None and f - f == 0.0:
                out.append((k[:MAX_SET_NAME], f))
                if len(out) >= MAX_EVAL_SETS:
                    break
    return out


EVALS_KEPT = 256  # evaluations of the primary set kept for "improved since step S?"


class EvalTrend:
    """The primary evaluation set's (step, loss) history: ``loss``, else the first set seen.

    Fed by the engine with every eval record (before the rules see it), read by rules
    through ``gain_since``.
    """

    __slots__ = ("name", "evals")

    def __init__(self) -> None:
        self.name: str | None = None
        self.evals: deque[tuple[int, float]] = deque(maxlen=EVALS_KEPT)

    def push(self, step: int | None, losses: list[tuple[str, float]]) -> None:
        if step is None or not losses:
            return
        names = [n for n, _ in losses]
        if "loss" in names and self.name != "loss":
            self.evals.clear()  # a plain ``loss`` set appeared: the primary one from now
            self.name = "loss"
        elif self.name is None:
            self.name = names[0]
        for name, loss in losses:
            if name == self.name:
                self.evals.append((step, loss))

    def gain_since(self, step: int) -> float | None:
        """How much lower the latest eval loss is than the last one at or before ``step``
        (the first one after it when none came before), relative to that one; ``None``
        without two evaluations to compare."""
        ev = self.evals
        if len(ev) < 2:
            return None
        base = next((x for s, x in reversed(ev) if s <= step), None)
        if base is None:
            base = ev[0][1]
        now = ev[-1][1]
        return (base - now) / abs(base) if base else None
