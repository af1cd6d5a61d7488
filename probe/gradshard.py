"""Sharded gradients (FSDP2, any DTensor): this rank's share of the squared norm.

A rank holds only its shard of such a gradient, so the whole model's norm needs every
rank's figure, and finding it here would take a collective: ``float()`` of a DTensor norm
is an all-reduce inside backward (and a GPU value read back later, on the writer thread,
would run it there, out of order with the training's own collectives). So no rank computes
it. Each one measures its local shards only (``to_local()``, no communication) and leaves
``latest_sq``: its share of the squared norm, logged as ``grad_sq_local`` instead of
``grad_norm``. A piece held by several ranks (a ``Replicate`` mesh dimension, as in HSDP;
a plain tensor, taken as replicated on every rank) is weighted by one over its number of
copies, so that the sum of every rank's share is the squared norm of the whole gradient;
the viewer adds them up per step (``GradNormJoin`` in ``tui/core/ranks/shardnorm.py``). A
``Partial`` gradient (not reduced yet) has no such share: the probe says so once and logs
no norm.

Kept apart from ``gradnorm.py``'s hooks and measurement because it answers one question,
what weight each gradient's squared norm gets, from DTensor placements and meshes that the
unsharded path never reads: ``gradnorm.py`` asks ``ShardWeights.of`` once per measured
backward (``None`` at once without DTensor gradients) and sums with ``weighted_sq`` only
when it gave weights.
"""

from __future__ import annotations

import sys
from typing import Any


class ShardWeights:
    """Per-gradient weights of the squared norm for DTensor gradients; plain runs pay one
    ``sys.modules`` look-up per backward until DTensor is loaded."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self.dtensor: Any = None  # the DTensor class, once torch.distributed.tensor is loaded
        self._copies: dict[Any, float] = {}  # (placements, mesh) -> 1 / copies of a piece
        self._partial_said = False

    def of(self, grads: list[Any]) -> list[float] | None:
        """None when no gradient is a DTensor (the plain path); else one weight per
        gradient, 1 / the number of ranks holding the same local piece (see the module
        docstring), or an empty list when a piece is ``Partial`` (then ask :meth:`news`)."""
        dt = self.dtensor
        if dt is None:
            mod = sys.modules.get("torch.distributed.tensor")  # no DTensor exists without it
            dt = self.dtensor = getattr(mod, "DTensor", None)
            if dt is None:
                return None
        # one test per distinct type, not per gradient: every backward of every run pays it
        # once DTensor is loaded (transformers, accelerate load it), sharded or not
        if not any(issubclass(t, dt) for t in set(map(type, grads))):
            return None
        plain = None
        out: list[float] = []
        copies = self._copies
        for g in grads:
            if isinstance(g, dt):
                key = (g.placements, id(g.device_mesh))
                w = copies.get(key)
                if w is None:
                    w = copies[key] = _piece_weight(g)
                if w == 0.0:
                    return []  # a Partial piece: no local share (see news())
            else:
                if plain is None:
                    plain = 1.0 / _world_size(self._torch)
                w = plain
            out.append(w)
        return out

    def news(self) -> BaseException | None:
        """After :meth:`of` gave ``[]``: the error that says why no norm is logged, the
        first time only; None after that."""
        if self._partial_said:
            return None
        self._partial_said = True
        return RuntimeError(
            "a Partial (unreduced) DTensor gradient: its norm needs a "
            "collective, which the probe never runs; grad_norm not logged"
        )


def _piece_weight(g: Any) -> float:
    """1 / the number of ranks that hold the same local piece of DTensor ``g``: the product
    of the mesh sizes along its ``Replicate`` dimensions (``Shard`` ones split it); 0.0 for
    a ``Partial`` one, whose local values are not a piece of the gradient at all."""
    copies = 1
    mesh = g.device_mesh
    for dim, placement in enumerate(g.placements):
        if placement.is_partial():
            return 0.0
        if placement.is_replicate():
            copies *= mesh.size(dim)
    return 1.0 / copies


def _world_size(torch: Any) -> int:
    """Ranks in the default process group (a local read, no communication); 1 without one."""
    try:
        dist = torch.distributed
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    except Exception:
        return 1


def weighted_sq(torch: Any, stacked: Any, weights: list[float]) -> Any:
    """Sum of ``weight * norm**2`` over ``stacked`` (the per-gradient norms, AMP scale
    removed) as a 0-d tensor on their device, without a host copy: the weights are Python
    floats, one multiplication per distinct weight (FSDP: all 1.0; HSDP: all 1/replicas),
    so no weight tensor is ever sent to the device (a pageable copy would sync)."""
    groups: dict[float, list[int]] = {}
    for j, w in enumerate(weights):
        groups.setdefault(w, []).append(j)
    if len(groups) == 1:
        (w,) = groups
        sq = stacked.square().sum()
        return sq if w == 1.0 else sq * w
    total = None
    for w, members in groups.items():
        part = torch.stack([stacked[j] for j in members]).square().sum() * w
        total = part if total is None else total + part
    return total
