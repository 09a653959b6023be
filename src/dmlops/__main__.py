"""``python -m dmlops``: the dmlops command line."""

from .cli import main

raise SystemExit(main())
