"""The principal of a TLS client: its certificate's subject as Java's
``X500Principal.getName()`` prints it (RFC 2253), mapped by ``ssl.principal.mapping.rules``
as Kafka's ``SslPrincipalMapper`` and ``DefaultKafkaPrincipalBuilder`` do.

Rules are Kafka's: ``RULE:pattern/replacement/[LU]`` or ``DEFAULT``, comma separated
(whitespace and newlines around the commas are ignored). A pattern must match the whole DN;
the replacement's ``$n`` are its groups (a ``$n`` beyond the last group is literal text, as in
Kafka). Patterns are Java regular expressions run by Python's ``re``: the common syntax is the
same, ``(?<name>...)`` is translated, and Java-only constructs (``\\p{...}``, possessive
quantifiers before Python 3.11) are refused as a bad rule.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"

# Kafka's SslPrincipalMapper grammar. Groups: 1 DEFAULT, 2 pattern, 4 replacement, 6 case.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_JAVA_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z])")
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule maps the DN: Kafka fails the authentication."""


_Part = str | int  # literal text, or a group number
_NamedPart = tuple[str]  # a named group


@dataclass(frozen=True)
class _Rule:
    source: str  # as Kafka prints it in NoMatchingRule's message
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[_Part | _NamedPart, ...]
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # As Java's replaceAll: every match, even the empty one .* finds at the end.
        result = self.pattern.sub(self._expand, dn)
        return (
            result.lower() if self.case == "L" else result.upper() if self.case == "U" else result
        )

    def _expand(self, match: re.Match[str]) -> str:
        out = []
        for part in self.replacement:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append(match.group(part if isinstance(part, int) else part[0]) or "")
        return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule that matches gives the name."""

    def __init__(self, rules: tuple[_Rule, ...]) -> None:
        self._rules = rules

    def name(self, distinguished_name: str) -> str:
        for rule in self._rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        listed = ", ".join(rule.source for rule in self._rules)
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{listed}]")


def parse_mapping_rules(rules: str) -> SslPrincipalMapper:
    """Parses ``ssl.principal.mapping.rules``; raises ValueError with Kafka's message."""
    parsed: list[_Rule] = []
    for found in _RULE_SPLITTER.finditer(rules.strip()):
        rule = found.group(1)
        match = _RULE_PARSER.match(rule)
        if match is None:
            raise ValueError(f"Invalid rule: {rule}")
        if match.end() != len(rule):
            raise ValueError(
                f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`"
            )
        if match.group(1) is not None:
            parsed.append(_Rule("DEFAULT", None, (), ""))
        elif match.group(2) is not None:  # otherwise an empty rule, which Kafka ignores
            parsed.append(_compile_rule(rule, match.group(2), match.group(4), match.group(6)))
    return SslPrincipalMapper(tuple(parsed))


def _compile_rule(rule: str, pattern: str, replacement: str, case: str) -> _Rule:
    try:
        compiled = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", pattern))
    except re.error as e:
        raise ValueError(f"Invalid rule: `{rule}`: bad pattern: {e}") from None
    parts = _java_replacement(
        _escape_literal_back_references(replacement, compiled.groups), compiled
    )
    if parts is None:
        raise ValueError(f"Invalid rule: `{rule}`: bad replacement `{replacement}`")
    source = f"RULE:{pattern}/{replacement}" + (f"/{case}" if case else "")
    return _Rule(source, compiled, parts, case)


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's rule: a ``$n`` naming no group (after dropping trailing digits, as Java reads
    ``$12`` as ``$1`` then ``2`` when there are fewer than 12 groups) is literal text."""
    if groups == 0:
        return replacement

    def escape(match: re.Match[str]) -> str:
        digits = match.group(1)
        if digits.startswith("0"):
            return match.group(0)
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        return "\\" + match.group(0) if index > groups else match.group(0)

    return _BACK_REFERENCE.sub(escape, replacement)


def _java_replacement(
    replacement: str, pattern: re.Pattern[str]
) -> tuple[_Part | _NamedPart, ...] | None:
    """Java's Matcher replacement syntax: ``\\x`` is x, ``$n`` a group (digits read while the
    number stays a group), ``${name}`` a named group. None if Java would refuse it."""
    parts: list[_Part | _NamedPart] = []
    literal: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            if i + 1 == len(replacement):
                return None
            literal.append(replacement[i + 1])
            i += 2
            continue
        if c != "$":
            literal.append(c)
            i += 1
            continue
        i += 1
        if literal:
            parts.append("".join(literal))
            literal = []
        if replacement.startswith("{", i):
            end = replacement.find("}", i)
            if end < 0 or replacement[i + 1 : end] not in pattern.groupindex:
                return None
            parts.append((replacement[i + 1 : end],))
            i = end + 1
            continue
        if i == len(replacement) or not replacement[i].isdigit():
            return None
        number = int(replacement[i])
        i += 1
        while (
            i < len(replacement)
            and replacement[i].isdigit()
            and number * 10 + int(replacement[i]) <= pattern.groups
        ):
            number = number * 10 + int(replacement[i])
            i += 1
        if number > pattern.groups:
            return None
        parts.append(number)
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def principal_from_ssl(
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapper: SslPrincipalMapper
) -> str:
    """``User:<mapped DN>`` of the peer's certificate; ``User:ANONYMOUS`` without one.
    Raises NoMatchingRule when no rule maps the DN (the connection must then be closed)."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if der is None:
        return ANONYMOUS
    return "User:" + mapper.name(distinguished_name(der))


# --- X500Principal.getName(): RFC 2253 ---------------------------------------------------

# The attribute types Java prints by keyword in RFC 2253 form; any other is its dotted OID.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# The string types Java prints as text (others as #hex of the DER value), and their charsets.
_STRING_TAGS = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x14: "latin-1",  # T61String
    0x16: "ascii",  # IA5String
    0x1B: "ascii",  # GeneralString
    0x1E: "utf-16-be",  # BMPString
}
_ESCAPED = ',=+<>#;"\\'


def distinguished_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate exactly as Java's ``X500Principal.getName()``."""
    der = der_certificate
    _, _, start, end = _children(der, 0, len(der))[0]  # Certificate
    _, _, start, end = _children(der, start, end)[0]  # TBSCertificate
    tbs = _children(der, start, end)
    first = 1 if tbs[0][0] == 0xA0 else 0  # [0] version is optional
    _, _, name_start, name_end = tbs[first + 4]  # serial, signature, issuer, validity, subject
    rdns = []
    for _, _, set_start, set_end in _children(der, name_start, name_end):
        rdns.append("+".join(_ava(der, s, e) for _, _, s, e in _children(der, set_start, set_end)))
    return ",".join(reversed(rdns))


def _ava(der: bytes, start: int, end: int) -> str:
    (_, _, oid_start, oid_end), (tag, value_tlv, value_start, value_end) = _children(
        der, start, end
    )[:2]
    oid = _oid(der[oid_start:oid_end])
    keyword = _KEYWORDS.get(oid, oid)
    charset = _STRING_TAGS.get(tag)
    if keyword[0].isdigit() or charset is None:
        return f"{keyword}=#{der[value_tlv:value_end].hex()}"
    text = der[value_start:value_end].decode(charset, errors="replace")
    escaped = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text)
    # Then leading and trailing spaces (and CRs) of the escaped text are escaped too.
    lead = len(escaped) - len(escaped.lstrip(" \r"))
    trail = len(escaped.rstrip(" \r"))
    return (
        keyword
        + "="
        + "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(escaped))
    )


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, TLV start, content start, content end) of each TLV between start and end."""
    out = []
    while start < end:
        tag, length, header = der[start], der[start + 1], 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(der[start + 2 : start + 2 + count], "big")
            header += count
        out.append((tag, start, start + header, start + header + length))
        start += header + length
    if start != end:
        raise ValueError("malformed DER certificate")
    return out


def _oid(body: bytes) -> str:
    numbers: list[int] = []
    value = 0
    for byte in body:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            numbers.append(value)
            value = 0
    arc = min(numbers[0] // 40, 2)
    return ".".join(str(n) for n in [arc, numbers[0] - 40 * arc, *numbers[1:]])
