"""``sasl.jaas.config`` values, tokenized as Kafka's JaasConfig does.

``<LoginModule class> <required|requisite|sufficient|optional> key="value" key2=value2;``

Kafka runs the value through Java's StreamTokenizer with: bytes 0-32 whitespace; ``;`` and
``=`` single-character tokens; ``"`` and ``'`` quotes (C escapes inside, a quoted string ends
at its quote, a line end or the end); ``/`` starting a comment (``//``, ``/* */``, or ``/`` to
the end of the line); every other character a word character, except 129-159 which are
single-character tokens of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

_WORD, _QUOTED, _CHAR = "word", "quoted", "char"
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class JaasConfigError(ValueError):
    """A ``sasl.jaas.config`` value Kafka would refuse; the message is Kafka's."""


@dataclass(frozen=True)
class LoginModule:
    name: str  # the login module's class name
    flag: str  # lower case, one of CONTROL_FLAGS
    options: dict[str, str]

    def __repr__(self) -> str:
        # Options hold passwords (user_<name>="...", password="..."): names only.
        return f"LoginModule({self.name!r}, {self.flag!r}, options={sorted(self.options)})"


def _is_word_char(c: str) -> bool:
    o = ord(c)
    if o <= 32 or c in "\"';=/":
        return False
    return not 129 <= o <= 159


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs; a word's or quoted string's text is its value, a char's the char."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if ord(c) <= 32:
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                i = n if end < 0 else end + 2
            else:  # "//" or a lone "/": a comment to the end of the line
                while i < n and text[i] not in "\r\n":
                    i += 1
        elif c in "\"'":
            value, i = _quoted(text, i + 1, c)
            tokens.append((_QUOTED, value))
        elif _is_word_char(c):
            start = i
            while i < n and _is_word_char(text[i]):
                i += 1
            tokens.append((_WORD, text[start:i]))
        else:
            tokens.append((_CHAR, c))
            i += 1
    return tokens


def _quoted(text: str, i: int, quote: str) -> tuple[str, int]:
    out: list[str] = []
    n = len(text)
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c != "\\" or i >= n:
            out.append(c)
            continue
        c = text[i]
        i += 1
        if "0" <= c <= "7":  # up to three octal digits, the first 0-3 for three
            value, first = int(c), c
            for _ in range(2):
                if i < n and "0" <= text[i] <= "7" and (value < 8 or first <= "3"):
                    value = value * 8 + int(text[i])
                    i += 1
                else:
                    break
            out.append(chr(value))
        else:
            out.append(_ESCAPES.get(c, c))
    if i < n and text[i] == quote:
        i += 1
    return "".join(out), i


def parse_jaas_config(value: str) -> list[LoginModule]:
    """Every login module in ``value``, in order; JaasConfigError with Kafka's message."""
    tokens = _tokens(value)
    modules: list[LoginModule] = []
    pos = 0

    def value_of(index: int) -> str | None:
        kind, text = tokens[index]
        return None if kind == _CHAR else text

    while pos < len(tokens):
        name = value_of(pos)
        pos += 1
        if pos >= len(tokens):
            raise JaasConfigError("Login module control flag not specified in JAAS config")
        flag = value_of(pos)
        pos += 1
        if flag is None:
            raise JaasConfigError("Login module control flag is not available in the JAAS config")
        if flag.lower() not in CONTROL_FLAGS:
            raise JaasConfigError(f"Invalid login module control flag '{flag}' in JAAS config")
        options: dict[str, str] = {}
        while pos < len(tokens) and tokens[pos] != (_CHAR, ";"):
            key = value_of(pos)
            has_value = (
                pos + 2 < len(tokens)
                and tokens[pos + 1] == (_CHAR, "=")
                and value_of(pos + 2) is not None
            )
            if not has_value:
                raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config")
            option = str(value_of(pos + 2))
            options[str(key)] = option
            pos += 3
        if pos >= len(tokens):
            raise JaasConfigError("JAAS config entry not terminated by semi-colon")
        pos += 1
        if not name:
            raise JaasConfigError("Login module not specified in JAAS config")
        modules.append(LoginModule(name, flag.lower(), options))
    if not modules:
        raise JaasConfigError("Login module not specified in JAAS config")
    return modules


def parse_server_login_module(value: str) -> LoginModule:
    """The one login module of a broker's ``<mechanism>.sasl.jaas.config`` (Kafka's
    JaasContext refuses any other count with this message)."""
    modules = parse_jaas_config(value)
    if len(modules) != 1:
        raise JaasConfigError(
            f"JAAS config property contains {len(modules)} login modules, should be 1 module"
        )
    return modules[0]
