#!/usr/bin/env python3
"""Write the README's client compatibility table from compat_tests/results.json (what the
last runs of compat_tests/ recorded; see compat_tests/matrix.py).

    scripts/compat_table.py            # rewrite the table between the README's markers
    scripts/compat_table.py --check    # exit 1 if the README's table is not the file's
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from compat_tests.matrix import (  # noqa: E402
    README_PATH,
    RESULTS_PATH,
    load_results,
    render_table,
    replace_table,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS_PATH)
    parser.add_argument("--readme", type=Path, default=README_PATH)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    readme = args.readme.read_text()
    updated = replace_table(readme, render_table(load_results(args.results)))
    if args.check:
        if updated != readme:
            print(f"{args.readme}'s compatibility table is stale: run {sys.argv[0]}")
            return 1
        return 0
    args.readme.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
