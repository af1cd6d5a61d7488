"""Notifications that quote a path: broken after its "/" for the toast's width.

Why: a toast wraps its text at spaces and folds a word longer than a row wherever the
row ends, so "report written to /home/me/runs/exp-20240101.report.md" came out with a
folder's name in two halves, one per row, and a path read off the screen could not be
typed back. The text is broken here, before Textual sees it, at the separators
(``textfit.wrap_path``), for the width Textual gives a toast.
"""

from __future__ import annotations

from typing import Any

from textual.app import App

from ..core.text.textfit import wrap_path

# Textual's Toast: width 60, max-width 50% of the screen, padding 1 on each side and an
# outer left border of 1
TOAST_WIDTH = 60
TOAST_GUTTER = 4  # and one spare: a row exactly as wide as the text was folded


def toast_columns(screen_width: int) -> int:
    """Columns of text in a toast on a screen ``screen_width`` wide."""
    return max(8, min(TOAST_WIDTH, screen_width // 2) - TOAST_GUTTER)


def notify_wrapped(app: App[Any], message: str, **kwargs: Any) -> None:
    """``app.notify`` of ``message`` (already terminal-safe), its paths broken after a
    separator; as text, never markup (a path may hold "[")."""
    width = toast_columns(app.size.width)
    app.notify(wrap_path(message, width), markup=False, **kwargs)
