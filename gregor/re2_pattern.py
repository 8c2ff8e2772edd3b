"""Regular expressions as Kafka compiles them: RE2/J's syntax (no backreferences, lookaround,
atomic groups or possessive quantifiers), matched against a whole name as Java's
``matcher().matches()``. RE2 matches in linear time, so a hostile pattern cannot stall the
broker as one may with a backtracking engine.

Used for ListTransactions v2's TransactionalIdPattern and consumer groups'
SubscribedTopicRegex.

RE2 compiles on the event loop and holds the GIL, so a pattern's cost is bounded before
compiling, where RE2/J has no bound: at most ``MAX_PATTERN_CHARS`` characters and
``MAX_REPEATS`` counted repetitions in all (RE2 expands ``x{1000}`` into a thousand copies
before it checks its memory bound: a 7 KB pattern of them took 35-60 ms to be refused).
Such a pattern is refused as RE2 refuses one whose program outgrows its memory.
"""

from __future__ import annotations

import re
from typing import Any

import re2

MAX_PATTERN_CHARS = 64 * 1024  # parsing costs about 35 ns a character
MAX_REPEATS = 10_000
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_TOO_LARGE = "pattern too large - compile failed"  # RE2's words for its memory bound

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # an invalid pattern is the client's error, not the broker's

# RE2's error texts -> RE2/J's (Java's PatternSyntaxException.getDescription(), which Kafka
# puts in its messages).
_RE2J_DESCRIPTIONS = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
}


class Pattern:
    __slots__ = ("text", "_regexp")

    def __init__(self, text: str, regexp: Any) -> None:
        self.text = text
        self._regexp = regexp

    def matches(self, name: str) -> bool:
        """Whether the whole of ``name`` matches (Java's ``matcher(name).matches()``)."""
        return self._regexp.fullmatch(name) is not None


def _too_costly(text: str) -> bool:
    if len(text) > MAX_PATTERN_CHARS:
        return True
    repeats = 0
    for low, high in _REPEAT.findall(text):
        repeats += int((high or low)[:6])  # more digits are over the bound anyway
        if repeats > MAX_REPEATS:
            return True
    return False


def _compile(text: str) -> Pattern | str:
    if _too_costly(text):
        return _TOO_LARGE
    try:
        return Pattern(text, re2.compile(text, _OPTIONS))
    except re2.error as e:
        reason = e.args[0] if e.args else b""
        text_of = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        code = text_of.split(": ", 1)[0]
        return _RE2J_DESCRIPTIONS.get(code, code)


def compile(text: str) -> Pattern | None:
    """The pattern, or None when RE2/J would refuse it."""
    compiled = _compile(text)
    return compiled if isinstance(compiled, Pattern) else None


def syntax_error(text: str) -> str | None:
    """Why RE2/J refuses the pattern (its description, e.g. "missing closing )"), or None
    when it compiles."""
    compiled = _compile(text)
    return None if isinstance(compiled, Pattern) else compiled
