"""Config keys as Kafka's ConfigDef defines them, for broker, topic and group keys alike: a
type from Kafka's vocabulary, a default (as text), a validator, and the one parser from text
to typed value, failing with Kafka's ConfigException messages. It sits beside the subpackages
so that every one of them may import it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1


class Type(IntEnum):
    """Kafka's ConfigDef.Type, numbered as DescribeConfigs' config_type."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigError(ValueError):
    """Kafka's ConfigException: an invalid configuration value; the message names the key."""


def invalid(name: str, value: object, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


# Kafka's ConfigDef.Validator: given the key's name and its parsed value, raises ConfigError.
Validator = Callable[[str, Any], None]

_INTEGER_BITS = {Type.SHORT: 15, Type.INT: 31, Type.LONG: 63}
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: its default is text as a properties file holds it (None: no default)."""

    name: str
    type: Type
    default: str | None
    validator: Validator | None = None

    @property
    def sensitive(self) -> bool:
        return self.type is Type.PASSWORD

    def parse(self, text: str | None, name: str | None = None) -> Any:
        """`text` as a typed value, validated (None: no value); ConfigError naming `name` (a
        listener-prefixed key) or else this key."""
        if text is None:
            return None
        name = name or self.name
        value = _parse(self.type, name, text)
        if self.validator is not None:
            self.validator(name, value)
        return value


def _parse(kind: Type, name: str, text: str) -> Any:
    """Kafka's ConfigDef.parseType, except that a list drops empty items."""
    trimmed = text.strip()
    if kind in _INTEGER_BITS:
        bound = 1 << _INTEGER_BITS[kind]
        if not _INTEGER.fullmatch(trimmed) or not -bound <= int(trimmed) < bound:
            raise invalid(name, text, f"Not a number of type {kind.name}")
        return int(trimmed)
    if kind is Type.DOUBLE:
        try:
            return float(trimmed)
        except ValueError:
            raise invalid(name, text, "Not a number of type DOUBLE") from None
    if kind is Type.BOOLEAN:
        if trimmed.lower() not in ("true", "false"):
            raise invalid(name, text, "Expected value to be either true or false")
        return trimmed.lower() == "true"
    if kind is Type.LIST:
        return [item.strip() for item in trimmed.split(",") if item.strip()]
    return trimmed


def between(low: float | None, high: float | None = None) -> Validator:
    """Kafka's ConfigDef.Range."""

    def check(name: str, value: float) -> None:
        if low is not None and value < low:
            raise invalid(name, value, f"Value must be at least {low}")
        if high is not None and value > high:
            raise invalid(name, value, f"Value must be no more than {high}")

    return check


def at_least(low: float) -> Validator:
    return between(low)


def one_of(*allowed: str) -> Validator:
    """Kafka's ConfigDef.ValidString."""

    def check(name: str, value: str) -> None:
        if value not in allowed:
            raise invalid(name, value, "String must be one of: " + ", ".join(allowed))

    return check


def each_one_of(*allowed: str) -> Validator:
    """Kafka's ConfigDef.ValidList: every item one of `allowed`."""
    item = one_of(*allowed)

    def check(name: str, values: list[str]) -> None:
        for value in values:
            item(name, value)

    return check
