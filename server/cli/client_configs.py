"""``--producer-property`` and ``--consumer-property``: the Java clients' configs that the
CLI's own client has an equivalent for, each set onto the option that does the same
(``acks`` onto ``--acks``, ``group.id`` onto ``--group``, ...); any other is refused.

The options that such a config sets default to None in ``server/cli/args.py``: ``apply``
fills in the config's value, or the client's default. An option and a config that both say
something, and disagree, are refused (Kafka's console consumer refuses a ``--group`` and a
``group.id`` that differ, and ``--from-beginning`` with ``auto.offset.reset=latest``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.server.cli.client.connection import ClientError
from gregor.wire.compression import CODEC_NAMES


@dataclass(frozen=True, slots=True)
class ClientConfig:
    dest: str  # the parsed arguments' attribute it sets
    parse: Callable[[str], Any]  # raises ValueError with the reason
    default: Any
    option: str | None = None  # the option that sets it too


def _acks(text: str) -> int:
    if text not in ("all", "-1", "0", "1"):
        raise ValueError("must be all, -1, 0 or 1")
    return -1 if text == "all" else int(text)


def _codec(text: str) -> str:
    if text not in CODEC_NAMES.values():
        raise ValueError(f"must be one of {', '.join(CODEC_NAMES.values())}")
    return text


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _bool(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return text.strip().lower() == "true"


def _offset_reset(text: str) -> bool:
    """``auto.offset.reset`` as ``--from-beginning`` says it."""
    if text not in ("earliest", "latest"):
        raise ValueError("must be earliest or latest")
    return text == "earliest"


def _isolation(text: str) -> str:
    if text not in ("read_uncommitted", "read_committed"):
        raise ValueError("must be read_uncommitted or read_committed")
    return text


def _text(text: str) -> str:
    return text


PRODUCER = {
    "acks": ClientConfig("acks", _acks, -1, "--acks"),
    "compression.type": ClientConfig("compression_type", _codec, "none", "--compression-type"),
    "batch.size": ClientConfig("batch_size", _non_negative, 16384, "--batch-size"),
    "linger.ms": ClientConfig("linger_ms", _non_negative, 5, "--linger-ms"),
    "client.id": ClientConfig("client_id", _text, "gregor-produce"),
}
CONSUMER = {
    "group.id": ClientConfig("group", _text, None, "--group"),
    "auto.offset.reset": ClientConfig("from_beginning", _offset_reset, False, "--from-beginning"),
    "isolation.level": ClientConfig(
        "isolation_level", _isolation, "read_uncommitted", "--isolation-level"
    ),
    "enable.auto.commit": ClientConfig("auto_commit", _bool, True),
    "auto.commit.interval.ms": ClientConfig("commit_interval_ms", _non_negative, 5000),
    "client.id": ClientConfig("client_id", _text, "gregor-consume"),
}


def apply(
    args: Any, configs: dict[str, ClientConfig], given: list[tuple[str, str]], option: str
) -> None:
    """Set ``given`` (``option``'s key=value pairs) onto ``args``, then every config's
    default where neither an option nor a pair said anything; a ClientError names the
    first pair that is unknown, malformed or contradicts its option."""
    for key, text in dict(given).items():  # the last of a key counts, as in Kafka's tools
        config = configs.get(key)
        if config is None:
            raise ClientError(
                f"{option} {key}: this tool's client has no such setting "
                f"(it takes {', '.join(sorted(configs))})"
            )
        try:
            value = config.parse(text)
        except ValueError as e:
            raise ClientError(f"{option} {key}={text}: {e}") from None
        current = getattr(args, config.dest, None)
        if current is not None and current != value:
            raise ClientError(f"{option} {key}={text} contradicts {config.option}")
        setattr(args, config.dest, value)
    for config in configs.values():
        if getattr(args, config.dest, None) is None:
            setattr(args, config.dest, config.default)
