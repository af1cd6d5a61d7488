"""``python -m dltop.tui`` is the same as the ``dltop`` command."""

from .cli import main

raise SystemExit(main())
