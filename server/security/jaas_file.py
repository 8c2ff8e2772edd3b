"""JAAS login configuration files, the format Java's ConfigFile reads (the file that
``-Djava.security.auth.login.config=<file>`` names)::

    // comments as in Java
    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka"
        password="kafka-secret";
    };

Each section is a login context name and, in braces, the login modules of a
``sasl.jaas.config`` value (parsed by ``sasl/jaas.py``), closed by ``;``.
"""

from __future__ import annotations

import re
from pathlib import Path

from gregor.server.security.sasl.jaas import JaasConfigError, LoginModule, parse_jaas_config

_NAME = re.compile(r"[^\s{};\"'/]+")


def read_jaas_file(path: Path) -> dict[str, list[LoginModule]]:
    """Every login context of the file, by name; JaasConfigError naming the file when it
    is malformed, OSError when it cannot be read."""
    text = path.read_text()
    sections: dict[str, list[LoginModule]] = {}
    i = _skip(text, 0)
    while i < len(text):
        name = _NAME.match(text, i)
        if name is None:
            raise _error(path, text, i, "a login context name")
        i = _skip(text, name.end())
        if not text.startswith("{", i):
            raise _error(path, text, i, "'{'")
        end = _closing_brace(text, i + 1)
        if end < 0:
            raise _error(path, text, len(text), "'}'")
        try:
            sections[name.group()] = parse_jaas_config(text[i + 1 : end])
        except JaasConfigError as e:
            raise JaasConfigError(f"{path}, login context {name.group()}: {e}") from None
        i = _skip(text, end + 1)
        if not text.startswith(";", i):
            raise _error(path, text, i, "';' after the login context's '}'")
        i = _skip(text, i + 1)
    return sections


def _skip(text: str, i: int) -> int:
    """The index of the next character that is neither white space nor in a comment."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        else:
            return i
    return i


def _closing_brace(text: str, i: int) -> int:
    """The index of the ``}`` that closes a section, outside quotes and comments; -1 if none."""
    while i < len(text):
        i = _skip(text, i)
        if i >= len(text):
            break
        c = text[i]
        if c == "}":
            return i
        if c in "\"'":
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
            if i >= len(text):
                return -1
            i += 1
        else:
            i += 1
    return -1


def _error(path: Path, text: str, i: int, expected: str) -> JaasConfigError:
    line = text.count("\n", 0, i) + 1
    return JaasConfigError(f"{path}, line {line}: expected {expected}")
