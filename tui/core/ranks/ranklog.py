"""One rank (or one overlaid run) as the viewer holds it: its number, its log, its model.

Its own module because the charts across ranks (``jobcharts``), the cross-rank rules
(``crossrank``), the rank table (``rankrows``) and the job view (``rankjob``) all take
sequences of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..present.safetext import visible

if TYPE_CHECKING:
    from ..store.run import RunModel


@dataclass(frozen=True)
class RankLog:
    """One rank of a job as the viewer holds it: its number, its log and its model."""

    rank: int | None
    path: str
    model: RunModel

    @property
    def name(self) -> str:
        """``r3``; a file whose rank is unknown is named by its file name."""
        if self.rank is not None:
            return f"r{self.rank}"
        return visible(os.path.basename(self.path))
