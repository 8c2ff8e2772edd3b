"""The ``gregor`` command line, in the habits of Kafka's scripts and kcat.

``gregor serve`` runs a broker (``serve.py``). The tools talk to any Kafka-compatible broker
over the wire (``--bootstrap-server``): ``topics``, ``groups``, ``configs``, ``quotas``,
``acls``, ``produce``, ``consume`` and ``perf``; ``dump-log`` reads segment files directly.
Their options are in ``server/cli/args.py``; each subcommand's module is imported only when
it runs, after the guard below.
"""

from __future__ import annotations

import importlib
import os
import sys

from gregor.server.cli.args import parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # kio builds hypothesis strategies for its types whenever hypothesis is importable
    # (it is in a test environment): ~200 MB and a second of start-up a broker never needs.
    # So nothing may import kio before this line: this module imports only the grammar.
    # None in sys.modules makes the import fail (typeshed declares modules only there).
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    try:
        return importlib.import_module(args.module).run(args)
    except BrokenPipeError:  # `gregor consume ... | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - nothing more is written
        return 0
