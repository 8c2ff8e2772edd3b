"""Where and how Kafka keeps ACLs in ZooKeeper (ZkAclStore, ResourceZNode, ZkAclChangeStore):
paths, the per-resource JSON and the change notifications. Pure functions; no I/O.

    /kafka-acl/Topic/orders                    LITERAL patterns
    /kafka-acl-extended/prefixed/Group/app-    PREFIXED patterns
      {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                            "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>           "TOPIC:orders"  (a LITERAL pattern)
    /kafka-acl-extended-changes/acl_changes_<seq>  {"version":1,"resourceType":"GROUP",
                                                    "name":"app-","patternType":"PREFIXED"}

A change node names a resource pattern whose ACLs changed; readers reload that pattern's node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gregor.controller.acls.model import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_name,
    parse_principal,
    parse_upper_name,
)

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_SEQUENCE_PREFIX = "acl_changes_"
ACL_JSON_VERSION = 1


def store_path(pattern_type: PatternType) -> str:
    """The root of one pattern type's ACLs: /kafka-acl or /kafka-acl-extended/prefixed."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_PATH
    if pattern_type == PatternType.PREFIXED:
        return f"{EXTENDED_ACL_PATH}/{pattern_type.name.lower()}"
    raise ValueError(f"Invalid pattern type: {pattern_type.name}")


def resource_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{store_path(pattern_type)}/{resource_type.pascal_name}"


def paths_to_create() -> list[str]:
    """The nodes a broker makes sure exist at start-up (KafkaZkClient.createAclPaths): each
    store's root and a child per concrete resource type, and the change roots."""
    paths = []
    for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
        paths.append(store_path(pattern_type))
        paths.extend(
            resource_type_path(pattern_type, t)
            for t in ResourceType
            if t not in (ResourceType.UNKNOWN, ResourceType.ANY)
        )
    return [*paths, LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH]


def resource_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACLs. A "/" in the name is refused, as AclAuthorizer does."""
    if "/" in pattern.name:
        raise ValueError(f"ACL binding contains invalid resource name: {pattern.name}")
    return f"{resource_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def entry_to_json(entry: AccessControlEntry) -> dict[str, str]:
    """One ACL as the ZooKeeper JSON holds it (AclEntry.toMap)."""
    return {
        "principal": entry.principal,
        "permissionType": entry.permission.pascal_name,
        "operation": entry.operation.pascal_name,
        "host": entry.host,
    }


def entry_from_json(item: dict[str, Any]) -> AccessControlEntry:
    """AclEntry.fromBytes' reading of one ACL; an unknown name reads as UNKNOWN."""
    return AccessControlEntry(
        principal=parse_principal(_string(item, "principal")),
        host=_string(item, "host"),
        operation=parse_name(AclOperation, _string(item, "operation")),
        permission=parse_name(AclPermissionType, _string(item, "permissionType")),
    )


def _sorted(entries: Iterable[AccessControlEntry]) -> list[AccessControlEntry]:
    return sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """A resource znode's data."""
    acls = [entry_to_json(e) for e in _sorted(entries)]
    return _dumps({"version": ACL_JSON_VERSION, "acls": acls})


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """A resource znode's ACLs; no data (or JSON null) means none."""
    if not data:
        return frozenset()
    document = json.loads(data)
    if document is None:
        return frozenset()
    if not isinstance(document, dict) or document.get("version") != ACL_JSON_VERSION:
        raise ValueError(f"unsupported ACL JSON: {data!r}")
    acls = document.get("acls")
    if not isinstance(acls, list):
        raise ValueError(f"ACL JSON without an acls list: {data!r}")
    return frozenset(entry_from_json(item) for item in acls)


def change_path(pattern_type: PatternType) -> str:
    """The change-notification root for a pattern type."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES_PATH
    if pattern_type == PatternType.PREFIXED:
        return EXTENDED_CHANGES_PATH
    raise ValueError(f"Invalid pattern type: {pattern_type.name}")


def change_node(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(path, data) of the sequential node to create for a change to ``pattern``'s ACLs; the
    path ends in the prefix, ZooKeeper appends the sequence number."""
    path = f"{change_path(pattern.pattern_type)}/{CHANGE_SEQUENCE_PREFIX}"
    if pattern.pattern_type == PatternType.LITERAL:
        return path, f"{pattern.resource_type.name}:{pattern.name}".encode()
    event = {
        "version": ACL_JSON_VERSION,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return path, _dumps(event)


def decode_change(changes_path: str, data: bytes) -> ResourcePattern:
    """The resource pattern a change node under ``changes_path`` names."""
    if changes_path == LITERAL_CHANGES_PATH:
        text = data.decode()
        resource_type, sep, name = text.partition(":")
        if not sep:
            raise ValueError(
                f"expected a string in format ResourceType:ResourceName but got {text}"
            )
        return ResourcePattern(
            parse_upper_name(ResourceType, resource_type), name, PatternType.LITERAL
        )
    if changes_path == EXTENDED_CHANGES_PATH:
        event = json.loads(data)
        if not isinstance(event, dict) or event.get("version", 0) > ACL_JSON_VERSION:
            raise ValueError(f"Acl change event received for unsupported version: {data!r}")
        return ResourcePattern(
            parse_upper_name(ResourceType, _string(event, "resourceType")),
            _string(event, "name"),
            parse_upper_name(PatternType, _string(event, "patternType")),
        )
    raise ValueError(f"not an ACL change path: {changes_path}")


def _string(document: dict[str, Any], key: str) -> str:
    value = document.get(key)
    if not isinstance(value, str):
        raise ValueError(f"ACL JSON field {key!r} is not a string: {value!r}")
    return value


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
