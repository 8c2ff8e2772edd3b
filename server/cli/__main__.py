"""``python -m gregor.server.cli``: the ``gregor`` command."""

from gregor.server.cli.main import main

raise SystemExit(main())
