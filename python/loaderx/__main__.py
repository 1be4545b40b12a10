"""``python -m loaderx``: the ``loaderx`` command (``cli.py``)."""

from .cli import main

raise SystemExit(main())
