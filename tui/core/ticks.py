"""Checklist ticks a person made, kept in a sidecar file next to the log.

The viewer never writes to the user's log; ticks live in ``<log>.dltop-ticks.json`` so
that they survive a restart of the viewer and travel with the log. A sidecar that
cannot be written (read-only directory) only costs persistence: ticks stay in memory
and ``error`` says why, for the UI to show once.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SUFFIX = ".dltop-ticks.json"


def sidecar_path(log_path: str | os.PathLike[str]) -> Path:
    return Path(str(log_path) + SUFFIX)


class Ticks:
    """``{alert key: {step id, ...}}``, loaded at start, saved atomically on each change."""

    def __init__(self, log_path: str | os.PathLike[str] | None) -> None:
        self.path = sidecar_path(log_path) if log_path else None
        self.error: str | None = None
        self._ticks: dict[str, set[str]] = {}
        if self.path is not None and self.path.exists():
            try:
                raw = json.loads(self.path.read_text())
                for key, steps in (raw.get("ticks") or {}).items():
                    self._ticks[str(key)] = {str(s) for s in steps}
            except (OSError, ValueError, AttributeError, TypeError) as e:
                self.error = f"could not read {self.path.name}: {e}"

    def ticked(self, alert_key: str) -> set[str]:
        return set(self._ticks.get(alert_key, ()))

    def toggle(self, alert_key: str, step_id: str) -> bool:
        """Flip one tick, save, and return the new state."""
        steps = self._ticks.setdefault(alert_key, set())
        on = step_id not in steps
        if on:
            steps.add(step_id)
        else:
            steps.discard(step_id)
        self.save()
        return on

    def save(self) -> None:
        if self.path is None:
            return
        data = {"v": 1, "ticks": {k: sorted(v) for k, v in sorted(self._ticks.items()) if v}}
        try:
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
            self.error = None
        except OSError as e:
            self.error = f"ticks not saved ({e.strerror or e}); kept in memory"
