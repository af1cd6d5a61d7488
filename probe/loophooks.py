"""The hooks that tell where the loop is outside backward: forward and optimizer step.

Why here and not in ``gradnorm.py``: those hooks see gradients; these see the calls
around them. A forward pre-hook on the model moves the training thread's whereabouts
(``whereabouts.py``) to ``forward``; the optimizer's step pre- and post-hooks
(``Optimizer.register_step_pre_hook`` / ``register_step_post_hook``) bracket
``optimizer``. Every hook is removed by :meth:`LoopHooks.remove`, so the model and the
optimizer are left as they were found.

The autocast dtype of the training forward (the ``config`` event's ``amp.dtype``) is
read here too, in a forward pre-hook on the first module that holds parameters: it runs
inside the model's forward, where a framework's autocast is in effect (Accelerate wraps
``model.forward`` itself in autocast, so the top-level hooks run outside it). That hook
is armed for one forward with gradients enabled and removes itself: it is armed at
start and, until an autocast dtype has been seen, again by ``Probe.step()`` every
``CONFIG_EVERY`` steps (``runconfig.py``), so it costs nothing on the other steps.

Under ``torch.compile`` a hook of a compiled module is traced with it: each hook
starts by asking ``torch.compiler.is_compiling()``, which dynamo folds to a constant,
so a compiled forward carries no trace of the probe (and is not marked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .runconfig import unwrap_optimizer
from .whereabouts import Whereabouts

OnAmp = Callable[[str | None], None]  # the autocast dtype's name ("bfloat16"), None: off


class LoopHooks:
    """Forward and optimizer-step hooks that move ``where``; the autocast look."""

    def __init__(self, where: Whereabouts, on_amp: OnAmp | None = None) -> None:
        import torch

        self._torch = torch
        self._compiling = torch.compiler.is_compiling
        self._where = where
        self._handles: list[Any] = []
        self._forward_handle: Any = None  # the model's forward pre-hook (``drop_forward``)
        self._on_amp = on_amp
        self._amp_module: Any = None  # the first module holding parameters
        self._amp_handle: Any = None
        self.amp_seen = False  # an autocast dtype was seen: no more looks

    @property
    def looks_for_amp(self) -> bool:
        """Whether a forward will tell the autocast dtype (a module with parameters to hook)."""
        return self._amp_module is not None

    # --- forward ---------------------------------------------------------------------
    def watch_model(self, model: Any) -> None:
        """``forward`` at each call of ``model``; the autocast look inside it."""
        self._forward_handle = model.register_forward_pre_hook(self._pre_forward)
        self._handles.append(self._forward_handle)
        if self._on_amp is not None:
            self._amp_module = _first_with_params(model)
            self.arm_amp()

    def drop_forward(self) -> None:
        """``probe.loader()`` marks ``forward`` as it hands out each batch: the model's
        own hook is then redundant, and any hook sends every call of the model through
        torch's slower hooked path (~10-18 us a call measured on a 2-CPU VM)."""
        h = self._forward_handle
        if h is not None:
            self._forward_handle = None
            h.remove()
            self._handles = [x for x in self._handles if x is not h]

    def _pre_forward(self, _module: Any, _args: Any) -> None:
        if self._compiling():
            return
        self._where.forward()

    def arm_amp(self) -> None:
        """Look at autocast in the next training forward (once)."""
        m = self._amp_module
        if m is None or self._amp_handle is not None or self.amp_seen:
            return
        self._amp_handle = m.register_forward_pre_hook(self._look_amp)

    def _look_amp(self, module: Any, _args: Any) -> None:
        torch = self._torch
        if self._compiling() or not torch.is_grad_enabled():
            return  # an evaluation forward says nothing about training's autocast
        try:  # inside the user's forward: nothing may raise
            self._disarm()
            device = next(module.parameters(recurse=False)).device.type
            on = torch.is_autocast_enabled(device)
            dtype = str(torch.get_autocast_dtype(device)).removeprefix("torch.") if on else None
        except Exception:  # a device type autocast does not know: no more looks
            self._amp_module = None
            return
        if dtype is not None:
            self.amp_seen = True
        if self._on_amp is not None:
            self._on_amp(dtype)  # Probe._on_amp reports its own failures, never raises

    def _disarm(self) -> None:
        h, self._amp_handle = self._amp_handle, None
        if h is not None:
            h.remove()

    # --- optimizer -------------------------------------------------------------------
    def watch_optimizer(self, optimizer: Any) -> bool:
        """``optimizer`` inside ``optimizer.step()``; False for an object without step
        hooks (an adapter's lr snapshot, a pre-2.0 optimizer). A framework's wrapper
        (Accelerate's ``AcceleratedOptimizer``, which never runs the hooks of its own
        ``step``) is looked through: the torch optimizer inside is the one that steps."""
        optimizer = unwrap_optimizer(optimizer)
        pre = getattr(optimizer, "register_step_pre_hook", None)
        post = getattr(optimizer, "register_step_post_hook", None)
        if pre is None or post is None:
            return False
        self._handles.append(pre(self._pre_step))
        self._handles.append(post(self._post_step))
        return True

    def _pre_step(self, _opt: Any, args: Any, kwargs: Any) -> None:
        # a closure (Lightning's, LBFGS) runs the forward and backward inside the step;
        # `args` are step()'s own, the optimizer first
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        self._where.step_begins(closure is not None)

    def _post_step(self, _opt: Any, _args: Any, _kwargs: Any) -> None:
        self._where.step_ended()

    def remove(self) -> None:
        """Unhook everything: the model and optimizer are left as they were found."""
        self._disarm()
        for h in self._handles:
            h.remove()
        self._handles = []


def _first_with_params(model: Any) -> Any:
    """The first module (registration order) with parameters of its own: the input
    layer, called inside the model's forward."""
    for m in model.modules():
        if next(m.parameters(recurse=False), None) is not None:
            return m
    return None
