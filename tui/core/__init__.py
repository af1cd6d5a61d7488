"""The viewer's core: sources, store, rules, run status, checklists, crash diagnosis.

Nothing here may import Textual or torch (tests/project/test_boundaries.py enforces it),
so ``dltop check`` and the whole diagnosis are testable without a UI.
"""
