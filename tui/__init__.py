"""dltop.tui: the viewer side: sources, store, rules and checklists (the core, no
Textual), the Textual app, and the ``dltop`` command line.

The package root imports nothing: ``dltop check`` and the tests of the core must
not pay for Textual, and the viewer never needs torch.
"""
