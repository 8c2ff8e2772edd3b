"""Builds the `gregor` package as the wheel lays it out, from symlinks, for the static checkers.

The repository's folders become subpackages of `gregor` through setuptools' package-dir
mapping (pyproject.toml): `gregor.wire` is `wire/`. Installed editable, that mapping lives
in an import hook, which import-linter's graph builder and mypy never run: they look for
`gregor/wire/` on disk. This writes `.cache/package-tree/gregor/` (the repository's `gregor/`
files, plus one symlink per mapped folder) and prints the directory to put first on their
search path. Rebuilt on every run, so a module added or removed is seen at once.

    .venv/bin/python scripts/package_tree.py     # -> /path/to/repo/.cache/package-tree
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / ".cache" / "package-tree"


def build(repo: Path = REPO, tree: Path = TREE) -> Path:
    """Write the symlink tree under `tree` and return `tree`."""
    setuptools = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    shutil.rmtree(tree, ignore_errors=True)
    # Parents before children: `gregor` is a real directory holding links to its own files,
    # so the mapped folders can sit in it beside them.
    for package in sorted(mapping, key=lambda name: name.count(".")):
        source = repo / mapping[package]
        target = tree / package.replace(".", "/")
        if "." not in package:
            target.mkdir(parents=True)
            for entry in source.iterdir():
                if entry.name != "__pycache__":
                    (target / entry.name).symlink_to(entry)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source, target_is_directory=True)
    return tree


if __name__ == "__main__":
    print(build())
