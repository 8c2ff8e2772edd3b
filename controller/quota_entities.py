"""Client quota entities and keys, named as Kafka names them under /config in ZooKeeper.

An entity is (user, client id): each a sanitized name, ``<default>``, or None when not
part of the entity, so ``("alice", "<default>")`` is ``users/alice/clients/<default>``.
Names are URL-encoded (Kafka's Sanitizer) so that they are valid znodes and a real name
never reads as ``<default>``. An IP entity (KIP-612) is ``IpEntity(address)``, or
``IpEntity("<default>")`` for the default IP, at ``ips/<address>``; it holds only
``connection_creation_rate`` and is never combined with a user or client id.
"""

from __future__ import annotations

import ipaddress
import logging
import urllib.parse
from collections.abc import Mapping
from typing import NamedTuple

logger = logging.getLogger(__name__)

DEFAULT = "<default>"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Kafka's types: the byte rates are longs, the request percentage a double.
QUOTA_KEYS = {PRODUCER_BYTE_RATE: int, CONSUMER_BYTE_RATE: int, REQUEST_PERCENTAGE: float}
# The IP entity's one quota: an int (DynamicConfig.Ip).
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: int}
_ALL_KEYS = {**QUOTA_KEYS, **IP_QUOTA_KEYS}


class IpEntity(NamedTuple):
    """An IP quota entity: the address as the broker sees it, or ``<default>``."""

    ip: str


QuotaEntity = tuple[str | None, str | None] | IpEntity
QuotaConfigs = dict[QuotaEntity, dict[str, float]]


def normalize_ip(name: str) -> str | None:
    """The address in the form the broker compares (IPv4-mapped IPv6 as IPv4), or None if
    ``name`` is not an IP address."""
    try:
        ip = ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL-encoding with %20 for a space and %2A for '*'."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def entity_path(entity: QuotaEntity) -> str:
    """users/<u>/clients/<c>, users/<u>, clients/<c> or ips/<ip> (the path under /config)."""
    if isinstance(entity, IpEntity):
        return f"ips/{entity.ip}"
    user, client = entity
    if user is None:
        return f"clients/{client}"
    return f"users/{user}" if client is None else f"users/{user}/clients/{client}"


def parse_entity_path(path: str) -> QuotaEntity | None:
    """The entity a path under /config names; None if it names none."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "ips" and parts[1]:
        return IpEntity(parts[1])
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return None, parts[1]
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return parts[1], None
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return parts[1], parts[3]
    return None


def quotas_of(config: Mapping[str, str]) -> dict[str, float]:
    """The quotas among an entity's configs (other keys, e.g. SCRAM credentials, are not)."""
    out = {}
    for key, raw in config.items():
        if key in _ALL_KEYS:
            try:
                out[key] = float(raw)
            except ValueError:
                logger.warning("Ignoring the unreadable quota %s=%r", key, raw)
    return out


def with_quotas(config: Mapping[str, str], ops: Mapping[str, float | None]) -> dict[str, str]:
    """``config`` with each quota set, or removed (None), in Kafka's formats: the byte rates
    as longs, the percentage as a double."""
    out = dict(config)
    for key, value in ops.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(int(value)) if _ALL_KEYS[key] is int else repr(float(value))
    return out
