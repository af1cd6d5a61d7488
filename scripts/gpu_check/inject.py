"""Syncs planted in the probe on purpose: the no-sync check must see every one of them.

A check that cannot fail proves nothing. :func:`planted_syncs` puts a host read in the
two places a hidden sync would hide, for the length of a ``with`` block:

- the step path: ``convert_values`` (called inside ``Probe.step``) reads the loss with
  ``float()`` first, as a careless ``loss.item()`` would;
- the backward hooks: the end-of-backward callback reads a gradient element with
  ``float()``. This code is compiled under ``probe/gradnorm.py``'s file name (at a line
  of its docstring), as if written there, since a sync's place is told by its frame.

Each planted read is a real sync on a GPU (the debug mode reports it) and a read the
CPU watch intercepts; ``planted`` counts them as they happen.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# the planted hook, as if at the top of probe/gradnorm.py (its docstring: no device test there)
_HOOK_SOURCE = """
def _end_of_backward(self, gid, _orig=_orig, _counter=_counter):
    _orig(self, gid)
    g = self.params[0].grad
    if g is not None:
        _counter.append(float(g.reshape(-1)[0]))
"""


class Planted:
    def __init__(self) -> None:
        self.step: list[float] = []
        self.hook: list[float] = []

    @property
    def count(self) -> int:
        return len(self.step) + len(self.hook)


@contextmanager
def planted_syncs() -> Iterator[Planted]:
    from dltop.probe import gradnorm
    from dltop.probe import probe as probe_module

    planted = Planted()
    convert = probe_module.convert_values

    def convert_values(loss: Any, *a: Any, **k: Any) -> Any:
        if hasattr(loss, "detach"):
            planted.step.append(float(loss))  # the planted sync in the step path
        return convert(loss, *a, **k)

    orig_hook = gradnorm.GradNormTracker._end_of_backward
    ns: dict[str, Any] = {"_orig": orig_hook, "_counter": planted.hook}
    exec(compile(_HOOK_SOURCE, gradnorm.__file__ or "gradnorm.py", "exec"), ns)
    probe_module.convert_values = convert_values
    gradnorm.GradNormTracker._end_of_backward = ns["_end_of_backward"]  # type: ignore[method-assign]
    try:
        yield planted
    finally:
        probe_module.convert_values = convert
        gradnorm.GradNormTracker._end_of_backward = orig_hook  # type: ignore[method-assign]
