"""Builds the `gregor` package as the wheel lays it out, from symlinks, for the static checkers.

The repository's folders become subpackages of `gregor` through setuptools' package-dir
mapping (pyproject.toml): `gregor.wire` is `wire/`. Installed editable, that mapping lives
in an import hook, which import-linter's graph builder and mypy never run: they look for
`gregor/wire/` on disk. This writes `.cache/package-tree/gregor/` (the repository's `gregor/`
files, plus one symlink per mapped folder) and prints the directory to put first on their
search path. Brought up to date on every run, so a module added or removed is seen at once.

    .venv/bin/python scripts/package_tree.py     # -> /path/to/repo/.cache/package-tree
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / ".cache" / "package-tree"


def build(repo: Path = REPO, tree: Path = TREE) -> Path:
    """Bring the symlink tree under `tree` up to date and return `tree`."""
    setuptools = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    # link -> what it points to. `gregor` is a real directory holding links to its own
    # files, so the mapped folders can sit in it beside them.
    links: dict[Path, Path] = {}
    for package, folder in mapping.items():
        source = repo / folder
        target = tree / package.replace(".", "/")
        if "." not in package:
            for entry in source.iterdir():
                if entry.name != "__pycache__":
                    links[target / entry.name] = entry
        else:
            links[target] = source
    # Updated in place, never removed and rebuilt: another run of the checks (a colleague's,
    # in the same checkout) may be reading the tree right now.
    for directory in sorted({link.parent for link in links}):
        directory.mkdir(parents=True, exist_ok=True)
        for entry in directory.iterdir():
            if entry.is_symlink() and entry not in links:  # its file was removed
                entry.unlink(missing_ok=True)
    for link, source in links.items():
        if link.is_symlink() and link.readlink() == source:
            continue
        fresh = link.with_name(f".{link.name}.{os.getpid()}")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(source, target_is_directory=source.is_dir())
        os.replace(fresh, link)  # atomic: a reader sees the old link or the new one
    return tree


if __name__ == "__main__":
    print(build())
