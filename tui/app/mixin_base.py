"""The base class the app's mixins (view keys, alert pane, rank focus, exports) declare.

Why: each mixin calls the App's own methods (``notify``, ``query_one``, ``screen``...).
To the type checker its base is ``App[int]``, so those calls are checked against
Textual's real signatures; at run time it is ``object``, and ``DltopApp`` puts the one
real ``App`` last in its bases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App

    AppMixin = App[int]
else:
    AppMixin = object
