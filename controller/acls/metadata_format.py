"""ACLs in the embedded node's metadata (controller/metadata_log.py): one entry per resource
pattern, in the layout of that file's other tables.

The snapshot's table ``"acls"`` maps a pattern key to that pattern's ACLs, each as the
ZooKeeper JSON writes one (``zk_format.entry_to_json``), sorted:

    "acls": {"Topic:LITERAL:orders": [{"principal": "User:alice", "permissionType": "Allow",
                                       "operation": "Read", "host": "*"}],
             "Group:PREFIXED:app-": [...]}

The key is Kafka's own printed form of a pattern (the audit log's "Topic:LITERAL:orders"):
resource type as ZooKeeper names it, pattern type, then the name, which may itself hold
colons. A log change is absolute, like the others: ``{"op": "acl", "name": <key>, "value":
<the pattern's whole ACL list>}``, an empty list removing the pattern.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gregor.controller.acls.model import (
    AccessControlEntry,
    AclBinding,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_name,
    parse_upper_name,
)
from gregor.controller.acls.zk_format import entry_from_json, entry_to_json

CHANGE_OP = "acl"
TABLE = "acls"


def pattern_key(pattern: ResourcePattern) -> str:
    return str(pattern)


def parse_pattern_key(key: str) -> ResourcePattern:
    parts = key.split(":", 2)
    if len(parts) != 3:
        raise ValueError(f"expected ResourceType:PatternType:name, got {key!r}")
    resource_type, pattern_type, name = parts
    return ResourcePattern(
        parse_name(ResourceType, resource_type), name, parse_upper_name(PatternType, pattern_type)
    )


def entries_value(entries: Iterable[AccessControlEntry]) -> list[dict[str, str]]:
    ordered = sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))
    return [entry_to_json(e) for e in ordered]


def acl_change(pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> dict[str, Any]:
    """The metadata-log change setting ``pattern``'s whole ACL set (empty: removing it)."""
    return {"op": CHANGE_OP, "name": pattern_key(pattern), "value": entries_value(entries)}


def load_bindings(table: Mapping[str, list[dict[str, Any]]]) -> list[AclBinding]:
    """Every binding of a snapshot's ``"acls"`` table."""
    return [
        AclBinding(pattern, entry_from_json(item))
        for key, items in table.items()
        for pattern in (parse_pattern_key(key),)
        for item in items
    ]
