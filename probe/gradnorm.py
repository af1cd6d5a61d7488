"""The global gradient norm before any clipping, measured during backward.

Reading ``.grad`` in ``probe.step()`` is wrong in two common loops: when
``zero_grad()`` runs before ``probe.step()`` the gradients are gone, and when a
framework calls the probe after ``clip_grad_norm_`` and ``optimizer.step()``
(minGPT's ``on_batch_end``) the norm is pinned at the clip value, so an explosion
can never be seen. So the norm is taken where the gradient is complete and still
untouched: at the end of each backward pass.

How: a post-accumulate-grad hook on every trainable parameter; the first one to
fire in a backward pass queues an end-of-backward callback on the autograd engine.
That callback queues itself once more, so that it runs after callbacks queued
earlier in the same pass (DDP's gradient all-reduce finalisation, for instance),
and then computes every parameter's norm in one ``torch._foreach_norm`` and
reduces them to one scalar, exactly as ``torch.nn.utils.get_total_norm`` does.
With an AMP ``GradScaler`` (``Probe(scaler=...)``) the gradients are scaled during
backward; the norms are divided by the scale in use, read from the scaler's device
tensor (``get_scale()`` would sync). Each backward overwrites the result, so with gradient
accumulation the last one holds the norm of the fully accumulated gradient. The norm is
therefore computed after every backward of an accumulation (K times per optimizer step): the
hooks cannot know which backward is the last before clipping and ``optimizer.step()``, and
any later point may already see clipped or zeroed gradients. ``benchmarks/probe_overhead.py``
measures what that costs. ``probe.step()`` takes it and
clears it. On CUDA the scalar stays on the device (no sync); on the CPU it is
turned into a float here, outside the step.

On the steps where per-layer figures are wanted, the same pass also counts the
non-zero elements of every gradient (see ``_count_nonzero``) and starts one
non-blocking read-back of both vectors.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from dltop.probe.readback import Deadline, DeviceBatch


class GradNormTracker:
    """Hooks on a model's trainable parameters that leave the latest pre-clip norm behind."""

    def __init__(self, named_params: list[tuple[str, Any]], scaler: Any = None) -> None:
        import torch

        self._torch = torch
        self.names = [n for n, _ in named_params]
        self.params = [p for _, p in named_params]
        self.compute_total = True  # False once the user passes grad_norm= explicitly
        # set by the probe before the backward of a layers step (and at start when step 0 is
        # one); off by default so that no per-layer pass runs on backwards nobody asked for
        self.want_layers = False
        self.latest: Any = None  # float (CPU) or 0-d device tensor, None when no backward ran
        self.layers: tuple[list[str], DeviceBatch, list[int], list[str]] | None = None
        self.error: BaseException | None = None  # first failure, reported once by the probe
        self.backward_passes = 0
        self.scaler = scaler  # an AMP GradScaler: backward leaves grads multiplied by its scale
        self._queued: set[int] = set()
        # host times (perf_counter) of the latest backward's first gradient and its end:
        # the step's forward/backward split (a rank waiting in the all-reduce for a slow one
        # has a long backward); read and cleared by take_times()
        self.first_t = 0.0
        self.end_t = 0.0
        self._engine = torch.autograd.Variable._execution_engine
        self._task_id = torch._C._current_graph_task_id
        self._handles = [p.register_post_accumulate_grad_hook(self._hook) for p in self.params]

    def remove(self) -> None:
        """Unhook every parameter: the model is left as it was found."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, _param: Any) -> None:
        # Runs once per parameter per backward: keep it to a few attribute reads.
        if not (self.compute_total or self.want_layers):
            return
        gid = self._task_id()
        if gid in self._queued:
            return
        self.first_t = perf_counter()
        try:
            if len(self._queued) > 64:  # ids of passes that failed before their callback ran
                self._queued.clear()
            self._queued.add(gid)
            self._engine.queue_callback(lambda: self._requeue(gid))
        except Exception as e:  # never break the user's backward
            self.error = self.error or e

    def _requeue(self, gid: int) -> None:
        try:
            self._engine.queue_callback(lambda: self._end_of_backward(gid))
        except Exception:
            self._end_of_backward(gid)

    def _end_of_backward(self, gid: int) -> None:
        self.end_t = perf_counter()  # before our own norm computation
        self._queued.discard(gid)
        try:
            self.backward_passes += 1
            self._measure()
        except Exception as e:
            self.error = self.error or e

    def _measure(self) -> None:
        torch = self._torch
        grads: list[Any] = []
        index: list[int] = []
        for i, p in enumerate(self.params):
            g = p.grad
            if g is not None:
                grads.append(g)
                index.append(i)
        if not grads:
            self.latest = None
            return
        with torch.no_grad():
            groups: dict[tuple[Any, Any], list[int]] = {}
            for j, g in enumerate(grads):
                groups.setdefault((g.device, g.dtype), []).append(j)
            layers = self.want_layers
            if len(groups) == 1:
                norms = list(torch._foreach_norm(grads))
                nnz = _count_nonzero(torch, grads) if layers else []
            else:
                first = grads[0].device
                norms = [None] * len(grads)
                nnz = [None] * len(grads) if layers else []
                for members in groups.values():
                    sub = [grads[j] for j in members]
                    for j, n in zip(members, torch._foreach_norm(sub), strict=True):
                        norms[j] = n.to(first)
                    if layers:
                        counts = _count_nonzero(torch, sub)
                        for j, c in zip(members, counts, strict=True):
                            nnz[j] = c.to(first)
            stacked = torch.stack(norms)
            scale = getattr(
                self.scaler, "_scale", None
            )  # a device tensor: no sync, unlike get_scale()
            if scale is not None:
                stacked = stacked / scale.to(stacked.device)
            total = torch.linalg.vector_norm(stacked)
            if self.compute_total:
                self.latest = float(total) if total.device.type == "cpu" else total
            if layers:
                batch = DeviceBatch([stacked, torch.stack(nnz)])
                with_grad = set(index)
                self.layers = (
                    [self.names[i] for i in index],
                    batch,
                    [g.numel() for g in grads],
                    [n for i, n in enumerate(self.names) if i not in with_grad],
                )

    def on_step(self, given: Any, want_layers: bool | None) -> tuple[Any, BaseException | None]:
        """At ``probe.step()``: the norm measured since the last step, or the user's
        ``given`` one (after which the hooks stop computing it); whether the next backward
        measures per-layer figures (``None``: unchanged); the first failure, once."""
        if given is None:
            given = self.latest
        elif self.compute_total:
            self.compute_total = False  # the user's value from now on: no more work for us
        self.latest = None
        if want_layers is not None:
            self.want_layers = want_layers
        error, self.error = self.error, None
        return given, error

    def take_times(self) -> tuple[float, float] | None:
        """(first gradient, end of backward) of the latest backward since the last call."""
        first, end = self.first_t, self.end_t
        self.first_t = self.end_t = 0.0
        return (first, end) if first and end >= first else None

    def take_layers(self) -> tuple[list[str], DeviceBatch, list[int], list[str]] | None:
        """The per-layer figures of the last layers-step backward, once."""
        out, self.layers = self.layers, None
        return out


def _count_nonzero(torch: Any, grads: list[Any]) -> list[Any]:
    """Non-zero elements per gradient, as float32 scalars, with no gradient-sized temporary.

    On the CPU ``count_nonzero`` is a vectorised count, twice as fast as an L0 norm; on a
    GPU the L0 norm (``_foreach_norm`` with ord 0) is a plain reduction, while
    ``count_nonzero`` may materialise a boolean copy of the gradient.
    """
    if grads[0].device.type == "cpu":
        return [torch.count_nonzero(g).to(torch.float32) for g in grads]
    return list(torch._foreach_norm(grads, 0, dtype=torch.float32))


def layers_record(
    step: int,
    t: float,
    taken: tuple[list[str], DeviceBatch, list[int], list[str]],
    force: bool | Deadline,
) -> dict[str, Any] | None:
    """Build the ``layers`` record on the writer thread; ``None`` while the read-back is in flight."""
    names, batch, numels, no_grad = taken
    vals = batch.values(force)
    if vals is None:
        return None
    n = len(names)
    if len(vals) != 2 * n:
        return {"kind": "layers", "step": step, "t": t, "names": names, "no_grad": no_grad}
    norms = vals[:n]
    zero = [1.0 - c / m if m else 0.0 for c, m in zip(vals[n:], numels, strict=True)]
    return {
        "kind": "layers",
        "step": step,
        "t": t,
        "names": names,
        "grad_norm": norms,
        "zero_frac": zero,
        "no_grad": no_grad,
    }
