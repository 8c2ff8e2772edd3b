"""``.properties`` files as the harness writes them for brokers (``server.properties``) and
clients (``--command-config``, Java's ``client.properties``): escaped where Java's
``Properties.load`` needs it (what ``store`` escapes besides, ``=``, ``:``, ``#`` and ``!``
inside values, is left readable), so that ``gregor serve`` (``server/config.py``'s
``read_properties``) and Java read back exactly the values given, multi-line PEM and JAAS
values included; readable by the owner only, since they hold passwords."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_KEY_ENDS = "=:"  # and whitespace; "#" and "!" only where a line starts (a key's first)


def format_properties(properties: Mapping[str, str]) -> str:
    """One ``key=value`` line per property, ASCII only."""
    return "".join(
        f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}\n"
        for key, value in properties.items()
    )


def write_properties(path: Path, properties: Mapping[str, str]) -> Path:
    """Write ``properties`` to ``path`` (mode 0600, also when it existed) and return it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(format_properties(properties))
    return path


def _escape(text: str, *, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch == " " and (is_key or i == 0):  # a value keeps its inner spaces as they are
            out.append("\\ ")
        elif is_key and (ch in _KEY_ENDS or (i == 0 and ch in "#!")):
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:  # \uXXXX, as UTF-16 code units (a surrogate pair beyond the BMP)
            units = ch.encode("utf-16-be", "surrogatepass")
            out += [f"\\u{units[j]:02X}{units[j + 1]:02X}" for j in range(0, len(units), 2)]
    return "".join(out)
