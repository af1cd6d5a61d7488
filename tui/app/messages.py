"""Messages that cross from the source's reader thread into the app.

``post_message`` is thread-safe, so the reader thread posts exactly one message per
ingested chunk (never one per record); the app only notes that something changed and
leaves all drawing to its fixed-rate timer.
"""

from __future__ import annotations

from textual.message import Message


class Ingested(Message):
    """A chunk of records went into the RunModel (``records`` of them)."""

    def __init__(self, records: int) -> None:
        super().__init__()
        self.records = records


class SourceFailed(Message):
    """The source stopped with an error a person should read (one line)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class SourceEnded(Message):
    """A replay reached the end of its file (nothing more will come)."""
