"""What the probe learns about the run's set-up for the ``config`` event, and when.

Apart from ``probe.py`` because none of it runs per step: the optimizer and the clip norm
are read at start, the loader when ``probe.loader()`` wraps it, the autocast dtype when
the loop hooks see a training forward, the optimizer again every ``CONFIG_EVERY`` steps.
Each reads a user's object that can fail in its own way, and a failure costs only its
section of the event (said once, as the probe's error). The sections go to the probe's
``RunConfig`` (``runconfig.py``); ``Probe.step()``, a heartbeat or ``close()`` writes
the event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .runconfig import amp_section, clip_section, loader_section, optimizer_section

if TYPE_CHECKING:
    from .gradnorm import GradNormTracker
    from .loophooks import LoopHooks


class SetupSource(Protocol):
    """What the config learning reads in the probe (``Probe`` is one). Declared here so
    that this module needs nothing from ``probe.py``, which imports it."""

    scaler: Any
    clip_norm: float | None
    _watched_optimizer: Any
    _grad: GradNormTracker | None
    _loop: LoopHooks | None

    def _learn(self, name: str, value: Any) -> None: ...

    def _error(self, where: str, err: BaseException) -> None: ...


def learn_start(p: SetupSource) -> None:
    """What the probe knows at start: the optimizer, the clip norm given, and the
    AMP section unless a forward will tell its autocast dtype."""
    learn_optimizer(p)
    clip = clip_section(p.clip_norm)
    if clip is not None:
        p._learn("clip", clip)
    loop = p._loop
    if loop is None or not loop.looks_for_amp:  # no forward to look into: the scaler
        learn_amp(p, None, looked=False)  # and the parameters' dtype, if they tell


def refresh_config(p: SetupSource) -> None:
    """Every ``CONFIG_EVERY`` steps: the optimizer read again (param groups added, weight
    decay changed), the autocast look armed again until a dtype has been seen."""
    learn_optimizer(p)
    if p._loop is not None:
        p._loop.arm_amp()


def learn_optimizer(p: SetupSource) -> None:
    opt = p._watched_optimizer
    if opt is not None:
        try:
            p._learn("optimizer", optimizer_section(opt))
        except Exception as e:
            p._error("config (optimizer)", e)


def learn_loader(p: SetupSource, iterable: Any) -> None:
    try:
        p._learn("loader", loader_section(iterable))
    except Exception as e:
        p._error("config (loader)", e)


def learn_amp(p: SetupSource, dtype: str | None, looked: bool) -> None:
    """The AMP section: the autocast dtype a forward showed (``looked``), else the
    scaler and the parameters' dtype, when they tell anything."""
    try:
        params = p._grad.params if p._grad is not None else []
        amp = amp_section(p.scaler, params, dtype, looked)
        if looked or amp["scaler"] or "param_dtype" in amp:  # else: nothing known
            p._learn("amp", amp)
    except Exception as e:
        p._error("config (amp)", e)
