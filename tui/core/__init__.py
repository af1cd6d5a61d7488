"""The viewer's core, in wings that import only from the wings before them: text < files <
rules < diagnosis < store < ranks < sources < present (``scripts/importgraph.py --wings``).

Nothing here may import Textual or torch (tests/project/test_boundaries.py enforces it),
so ``dltop check`` and the whole diagnosis are testable without a UI.
"""
