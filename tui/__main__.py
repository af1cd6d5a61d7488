"""``python -m dltop.tui`` is the same as the ``dltop`` command."""

from dltop.tui.cli import main

raise SystemExit(main())
