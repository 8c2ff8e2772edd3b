"""The ACL model as the ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) name its fields: one
mapping for the broker's handlers (apis/acls.py) and Gregor's client (``gregor acls``).

A filter is a DescribeAcls request's or a DeleteAcls filter's fields; a pattern and an entry
are a DescribeAcls resource's and its ACL's, or a DeleteAcls matching ACL's; a CreateAcls
creation names its pattern type ``resource_pattern_type``."""

from __future__ import annotations

from typing import Any

from gregor.controller.acls.model import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)


def filter_fields(flt: AclBindingFilter) -> dict[str, Any]:
    pattern, entry = flt.pattern, flt.entry
    return {
        "resource_type_filter": pattern.resource_type,
        "resource_name_filter": pattern.name,
        "pattern_type_filter": pattern.pattern_type,
        "principal_filter": entry.principal,
        "host_filter": entry.host,
        "operation": entry.operation,
        "permission_type": entry.permission,
    }


def filter_from_fields(item: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType(item.resource_type_filter),
            item.resource_name_filter,
            PatternType(item.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            item.principal_filter,
            item.host_filter,
            AclOperation(item.operation),
            AclPermissionType(item.permission_type),
        ),
    )


def pattern_fields(pattern: ResourcePattern) -> dict[str, Any]:
    return {
        "resource_type": pattern.resource_type,
        "resource_name": pattern.name,
        "pattern_type": pattern.pattern_type,
    }


def entry_fields(entry: AccessControlEntry) -> dict[str, Any]:
    return {
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation,
        "permission_type": entry.permission,
    }


def binding_from_fields(pattern: Any, entry: Any, pattern_type: int) -> AclBinding:
    """From a resource's fields (``pattern``) and an ACL's (``entry``: the same item for a
    creation or a matching ACL); ``pattern_type`` as the message names it."""
    return AclBinding(
        ResourcePattern(
            ResourceType(pattern.resource_type), pattern.resource_name, PatternType(pattern_type)
        ),
        AccessControlEntry(
            entry.principal,
            entry.host,
            AclOperation(entry.operation),
            AclPermissionType(entry.permission_type),
        ),
    )
