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

**Sharded gradients (FSDP2, any DTensor).** No rank computes the whole norm (that
would take a collective inside backward): each measures its local shards and leaves
``latest_sq``, its share of the squared norm, logged as ``grad_sq_local``; the weights of
that share are ``gradshard.py``'s.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from .gradshard import ShardWeights, weighted_sq
from .readback import Deadline, DeviceBatch
from .whereabouts import BACKWARD, Whereabouts

# names, their norms and non-zero counts (one read-back), numels, parameters without a
# gradient, and whether the figures are of this rank's shards only (sharded gradients)
Layers = tuple[list[str], DeviceBatch, list[int], list[str], bool]


class GradNormTracker:
    """Hooks on a model's trainable parameters that leave the latest pre-clip norm behind."""

    def __init__(self, named_params: list[tuple[str, Any]], scaler: Any = None) -> None:
        import torch

        self._torch = torch
        self.names = [n for n, _ in named_params]
        self.params = [p for _, p in named_params]
        # False while the user passes grad_norm= at every step (from the second such step
        # in a row: their value wins, our work would be thrown away); a step without it
        # turns measuring back on from the next backward
        self.compute_total = True
        self._given_in_a_row = 0
        # set by the probe before the backward of a layers step (and at start when step 0 is
        # one); off by default so that no per-layer pass runs on backwards nobody asked for
        self.want_layers = False
        self.latest: Any = None  # float (CPU) or 0-d device tensor, None when no backward ran
        # sharded gradients: this rank's share of the squared norm instead (module docstring)
        self.latest_sq: Any = None
        self._shards = ShardWeights(torch)
        self.layers: Layers | None = None
        self.error: BaseException | None = None  # first failure, reported once by the probe
        self.scaler = scaler  # an AMP GradScaler: backward leaves grads multiplied by its scale
        self._queued: set[int] = set()
        # host times (perf_counter) of the latest backward's first gradient and its end:
        # the step's forward/backward split (a rank waiting in the all-reduce for a slow one
        # has a long backward); read and cleared by take_times()
        self.first_t = 0.0
        self.end_t = 0.0
        # the training thread's whereabouts, moved to `backward` by the first gradient of a
        # pass and out of it by the end-of-backward callback (set by the probe)
        self.where: Whereabouts | None = None
        self._engine = torch.autograd.Variable._execution_engine
        self._task_id = torch._C._current_graph_task_id
        self._handles = [p.register_post_accumulate_grad_hook(self._hook) for p in self.params]

    def remove(self) -> None:
        """Unhook every parameter: the model is left as it was found."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, _param: Any) -> None:
        # Runs once per parameter per backward: keep it to a few attribute reads. When no
        # norm is wanted (grad_norm= given) the pass's start and end still say where the
        # loop is (``backward``, see whereabouts.py) and time the step's phases: the first
        # hook of the pass takes the path below, the others see `backward` and return.
        if not (self.compute_total or self.want_layers):
            w = self.where
            if w is None or w.place is BACKWARD:
                return
        gid = self._task_id()
        if gid in self._queued:
            return
        self.first_t = t = perf_counter()
        w = self.where
        if w is not None:
            w.since = t
            w.place = BACKWARD
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
        self.end_t = t = perf_counter()  # before our own norm computation
        self._queued.discard(gid)
        if self.where is not None and not self._queued:  # not a nested pass (reentrant
            self.where.backward_ended(t)  # checkpointing): the outer one goes on
        if not (self.compute_total or self.want_layers):
            return  # the user's norm at every step, no layers step: nothing to measure
        try:
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
        self.latest_sq = None
        if not grads:
            self.latest = None
            return
        shards = self._shards
        weights = shards.of(grads)
        if weights is not None:
            if not weights:  # a Partial gradient: no local share to log
                self.latest = None
                self.error = self.error or shards.news()
                return
            grads = [g.to_local() if isinstance(g, shards.dtensor) else g for g in grads]
        numels = [g.numel() for g in grads]  # dense sizes, also for a sparse gradient
        if any(g.layout != torch.strided for g in grads):
            values = _sparse_values(torch, grads)
            if values is None:
                self.latest = None
                self.error = self.error or RuntimeError(_SPARSE_ON_DEVICE)
                return
            grads = values
        with torch.no_grad():
            groups: dict[tuple[Any, Any], list[int]] = {}
            for j, g in enumerate(grads):
                groups.setdefault((g.device, g.dtype), []).append(j)
            layers = self.want_layers
            if len(groups) == 1:
                norms = list(torch._foreach_norm(grads))
                nnz = _count_nonzero(torch, grads) if layers else []
            else:
                # gathered on a device, never on the host: a device norm copied to the CPU
                # is a sync in every backward (a CPU-resident embedding listed first made
                # it one); a CPU norm goes to the device without one (non_blocking)
                first = _gather_device(grads)
                norms = [None] * len(grads)
                nnz = [None] * len(grads) if layers else []
                for members in groups.values():
                    sub = [grads[j] for j in members]
                    for j, n in zip(members, torch._foreach_norm(sub), strict=True):
                        norms[j] = n.to(first, non_blocking=True)
                    if layers:
                        counts = _count_nonzero(torch, sub)
                        for j, c in zip(members, counts, strict=True):
                            nnz[j] = c.to(first, non_blocking=True)
            stacked = torch.stack(norms)
            scale = getattr(
                self.scaler, "_scale", None
            )  # a device tensor: no sync, unlike get_scale()
            if scale is not None:
                stacked = stacked / scale.to(stacked.device)
            if weights is not None:
                total = weighted_sq(torch, stacked, weights)
                if self.compute_total:
                    self.latest = None
                    self.latest_sq = float(total) if total.device.type == "cpu" else total
            else:
                total = torch.linalg.vector_norm(stacked)
                if self.compute_total:
                    self.latest = float(total) if total.device.type == "cpu" else total
            if layers:
                batch = DeviceBatch([stacked, torch.stack(nnz)])
                with_grad = set(index)
                self.layers = (
                    [self.names[i] for i in index],
                    batch,
                    numels,
                    [n for i, n in enumerate(self.names) if i not in with_grad],
                    weights is not None,
                )

    def on_step(self, given: Any, want_layers: bool | None) -> tuple[Any, BaseException | None]:
        """At ``probe.step()``: the norm measured since the last step, or the user's
        ``given`` one (given at two steps in a row, the hooks stop computing it until a
        step comes without); whether the next backward measures per-layer figures
        (``None``: unchanged); the first failure, once."""
        if given is None:
            given = self.latest
            self._given_in_a_row = 0
            self.compute_total = True  # given once, or every other step: still measured
        else:
            self._given_in_a_row += 1
            if self._given_in_a_row >= 2:
                self.compute_total = False  # the user's value at every step: spare the work
        if given is not None:
            self.latest_sq = None  # a norm given (or measured) wins over a local share
        self.latest = None
        if want_layers is not None:
            self.want_layers = want_layers
        error, self.error = self.error, None
        return given, error

    def take_sq(self) -> Any:
        """This rank's share of the squared norm (sharded gradients), once; else None."""
        out, self.latest_sq = self.latest_sq, None
        return out

    def take_times(self) -> tuple[float, float] | None:
        """(first gradient, end of backward) of the latest backward since the last call."""
        first, end = self.first_t, self.end_t
        self.first_t = self.end_t = 0.0
        return (first, end) if first and end >= first else None

    def take_layers(self) -> Layers | None:
        """The per-layer figures of the last layers-step backward, once."""
        out, self.layers = self.layers, None
        return out


def _gather_device(grads: list[Any]) -> Any:
    """Where gradients on several devices have their norms put together: the first one
    not on the CPU (copying a norm from the host there needs no sync; the other way, a
    device scalar read into host memory, waits for the device), the CPU when all are."""
    for g in grads:
        if g.device.type != "cpu":
            return g.device
    return grads[0].device


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
    taken: Layers,
    force: bool | Deadline,
) -> dict[str, Any] | None:
    """Build the ``layers`` record on the writer thread; ``None`` while the read-back is in flight."""
    names, batch, numels, no_grad, sharded = taken
    vals = batch.values(force)
    if vals is None:
        return None
    n = len(names)
    rec: dict[str, Any] = {"kind": "layers", "step": step, "t": t, "names": names}
    if len(vals) == 2 * n:
        rec["grad_norm"] = vals[:n]
        rec["zero_frac"] = [
            1.0 - c / m if m else 0.0 for c, m in zip(vals[n:], numels, strict=True)
        ]
    rec["no_grad"] = no_grad
    if sharded:
        rec["sharded"] = True  # the figures are of this rank's shards of each gradient
    return rec


def trainable_params(model: Any, optimizer: Any) -> list[tuple[str, Any]]:
    """The named parameters whose gradients the norm covers: the model's that require a
    gradient, else the optimizer's (``group<G>.param<P>``), else none. May raise (a model
    whose ``named_parameters`` fails): the caller reports it once and records without."""
    if model is not None:
        return [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if optimizer is not None:
        return [
            (f"group{gi}.param{pi}", p)
            for gi, g in enumerate(optimizer.param_groups)
            for pi, p in enumerate(g["params"])
            if p.requires_grad
        ]
    return []


_SPARSE_ON_DEVICE = (
    "sparse gradients on a GPU (nn.Embedding(sparse=True)): their norm needs a coalesce, "
    "which synchronises; grad_norm not logged (pass grad_norm= to probe.step)"
)


def _sparse_values(torch: Any, grads: list[Any]) -> list[Any] | None:
    """The gradients with each sparse one as its values, whose norm is the gradient's; a
    sparse COO one is coalesced first (a backward leaves an index repeated per use). On a
    GPU that coalesce synchronises: ``None``, the norm is not measured."""
    out = []
    for g in grads:
        if g.layout == torch.strided:
            out.append(g)
        elif g.device.type != "cpu":
            return None
        else:
            out.append(g.coalesce().values() if g.layout == torch.sparse_coo else g.values())
    return out
