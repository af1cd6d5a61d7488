"""dltop.probe: the training-side recorder.

Imported inside the user's training process, so importing it must cost almost
nothing and pull in nothing but the standard library: torch, psutil and pynvml
are imported lazily, inside the functions that need them. ``Probe`` itself is
loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Probe", "SCHEMA_VERSION"]

from .schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from .probe import Probe


def __getattr__(name: str) -> Any:
    if name == "Probe":
        from .probe import Probe

        return Probe
    raise AttributeError(f"module 'dltop.probe' has no attribute {name!r}")
