"""Where child processes (a broker, the log cleaner's workers) find this very ``gregor``."""

from __future__ import annotations

import os
import site
from collections.abc import MutableMapping
from pathlib import Path

import gregor


def import_root() -> Path:
    """The directory holding the ``gregor`` package this process imported: a source
    checkout, or the site-packages it was installed into."""
    return Path(gregor.__file__).resolve().parent.parent


def set_child_pythonpath(env: MutableMapping[str, str]) -> None:
    """Make ``env`` (for a child running ``sys.executable``) import the same gregor: the
    import root goes first on PYTHONPATH, unless the interpreter finds it there anyway (a
    site directory, which must not move ahead of the standard library)."""
    root = import_root().resolve()
    sites = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root in sites:
        return
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(root), *([existing] if existing else [])])
