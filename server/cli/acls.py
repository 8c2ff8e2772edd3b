"""``gregor acls``: add, remove and list ACLs on any Kafka-compatible broker over the wire
(CreateAcls, DeleteAcls, DescribeAcls), as Kafka's ``kafka-acls.sh`` (AclCommand) does, with
its options, its expansions of ``--producer`` / ``--consumer`` / ``--idempotent``, its
checks and its output.

Each resource option (``--topic``, ``--group``, ``--transactional-id``, ``--cluster``) names a
resource pattern (with ``--resource-pattern-type``), or for ``--list`` and ``--remove`` a
pattern filter; each principal, host and operation combination is one ACL on each.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from gregor.controller.acls.api_fields import binding_from_fields, entry_fields, filter_fields
from gregor.controller.acls.model import (
    CLUSTER_NAME,
    WILDCARD,
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
    check_operation_supported,
    parse_name,
    parse_principal,
)
from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.wire.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS

VERSION = 1  # served by every broker since Kafka 2.0, up to 4.x
_O = AclOperation
PRODUCER_TOPIC = (_O.WRITE, _O.DESCRIBE, _O.CREATE)
PRODUCER_TRANSACTIONAL_ID = (_O.WRITE, _O.DESCRIBE)
CONSUMER_TOPIC = (_O.READ, _O.DESCRIBE)
CONSUMER_GROUP = (_O.READ,)

Acls = dict[ResourcePatternFilter, set[AccessControlEntry]]


class UsageError(ClientError):
    """A combination of options kafka-acls.sh refuses."""


# -- requests -------------------------------------------------------------------------------
def _check(code: Any, message: str | None) -> None:
    if code.value != 0:
        raise ClientError(f"{code.name.upper()}" + (f" ({message})" if message else ""))


def describe_acls(client: Client, flt: AclBindingFilter) -> list[AclBinding]:
    answer = client.call(schema(DESCRIBE_ACLS, VERSION)(**filter_fields(flt)))
    _check(answer.error_code, answer.error_message)
    return [binding_from_fields(r, a, r.pattern_type) for r in answer.resources for a in r.acls]


def create_acls(client: Client, bindings: Iterable[AclBinding]) -> None:
    creation = schema(CREATE_ACLS, VERSION, "AclCreation")
    creations = tuple(
        creation(
            resource_type=b.pattern.resource_type,
            resource_name=b.pattern.name,
            resource_pattern_type=b.pattern.pattern_type,
            **entry_fields(b.entry),
        )
        for b in bindings
    )
    answer = client.call(schema(CREATE_ACLS, VERSION)(creations=creations))
    for result in answer.results:
        _check(result.error_code, result.error_message)


def delete_acls(client: Client, filters: Iterable[AclBindingFilter]) -> None:
    item = schema(DELETE_ACLS, VERSION, "DeleteAclsFilter")
    request = schema(DELETE_ACLS, VERSION)(filters=tuple(item(**filter_fields(f)) for f in filters))
    answer = client.call(request)
    for result in answer.filter_results:
        _check(result.error_code, result.error_message)
        for acl in result.matching_acls:
            _check(acl.error_code, acl.error_message)


# -- what the options name (AclCommand) -------------------------------------------------------
def resource_filters(
    args: argparse.Namespace, *, required: bool = True
) -> list[ResourcePatternFilter]:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    found: list[ResourcePatternFilter] = []
    found += [
        ResourcePatternFilter(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic
    ]
    if pattern_type == PatternType.LITERAL and (args.cluster or args.idempotent):
        found.append(ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    found += [
        ResourcePatternFilter(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group
    ]
    found += [
        ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, pattern_type)
        for t in args.transactional_id
    ]
    if not found and required:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <transactional-id>"
        )
    return list(dict.fromkeys(found))


def _principals(values: list[str]) -> set[str]:
    try:
        return {parse_principal(v.strip()) for v in values}
    except ValueError as e:
        raise UsageError(str(e)) from None


def entries(
    args: argparse.Namespace, operations: Iterable[AclOperation]
) -> set[AccessControlEntry]:
    """Each principal with each operation and host (* by default), allowed or denied."""
    found: set[AccessControlEntry] = set()
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in _principals(principals):
            for host in {h.strip() for h in hosts} or {WILDCARD}:
                found.update(
                    AccessControlEntry(principal, host, op, permission) for op in operations
                )
    return found


def filter_to_acls(args: argparse.Namespace) -> Acls:
    """The ACLs of each resource (filter) the options name, with the conveniences expanded."""
    filters = resource_filters(args)
    acls: Acls = {}
    if not args.producer and not args.consumer:
        operations = {parse_name(AclOperation, o.strip()) for o in args.operation or ["All"]}
        acls = {f: entries(args, operations) for f in filters}
    if args.producer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                acls[f] = entries(args, PRODUCER_TOPIC)
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                acls[f] = entries(args, PRODUCER_TRANSACTIONAL_ID)
        if args.idempotent:
            cluster = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            acls[cluster] = entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                acls[f] = acls.get(f, set()) | entries(args, CONSUMER_TOPIC)
            elif f.resource_type == ResourceType.GROUP:
                acls[f] = acls.get(f, set()) | entries(args, CONSUMER_GROUP)
    for f, found in acls.items():
        for entry in found:
            try:
                check_operation_supported(f.resource_type, entry.operation)
            except ValueError as e:
                raise UsageError(str(e)) from None
    return acls


def check_options(args: argparse.Namespace) -> None:
    """AclCommandOptions.checkArgs."""
    if args.list and (
        args.producer
        or args.consumer
        or args.allow_principal
        or args.deny_principal
        or args.allow_host
        or args.deny_host
    ):
        raise UsageError(
            "--list does not take --producer, --consumer, --allow-principal, "
            "--deny-principal, --allow-host or --deny-host"
        )
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )


# -- output, as kafka-acls.sh prints it -------------------------------------------------------
def pattern_text(pattern: ResourcePattern | ResourcePatternFilter) -> str:
    """ResourcePattern's (and ResourcePatternFilter's) toString."""
    name = "<any>" if pattern.name is None else pattern.name
    return (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={name}, "
        f"patternType={pattern.pattern_type.name})"
    )


def entry_text(e: AccessControlEntry) -> str:
    return (
        f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
        f"permissionType={e.permission.name})"
    )


def _block(title: str, found: Iterable[AccessControlEntry]) -> str:
    lines = "\n".join("\t" + entry_text(e) for e in sorted(found, key=entry_text))
    return f"{title}\n {lines} \n"


# -- actions -----------------------------------------------------------------------------------
def _add(client: Client, args: argparse.Namespace) -> None:
    if args.resource_pattern_type in ("any", "match"):
        raise UsageError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' is "
            "not valid when adding acls."
        )
    acls = filter_to_acls(args)
    if any(not found for found in acls.values()):
        raise UsageError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    for f, found in acls.items():
        pattern = ResourcePattern(f.resource_type, f.name or "", f.pattern_type)
        text = pattern_text(f)
        print(_block(f"Adding ACLs for resource `{text}`: ", found))
        create_acls(client, (AclBinding(pattern, e) for e in found))


def _confirmed(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


def _remove(client: Client, args: argparse.Namespace) -> None:
    for f, found in filter_to_acls(args).items():
        text = pattern_text(f)
        if not found:
            question = (
                f"Are you sure you want to delete all ACLs for resource filter `{text}`? (y/n)"
            )
            if _confirmed(args, question):
                delete_acls(client, [AclBindingFilter(f, AccessControlEntryFilter())])
            continue
        question = _block("Are you sure you want to remove ACLs: ", found)
        if _confirmed(args, f"{question} from resource filter `{text}`? (y/n)"):
            delete_acls(
                client,
                [
                    AclBindingFilter(
                        f, AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission)
                    )
                    for e in found
                ],
            )


def _list(client: Client, args: argparse.Namespace) -> None:
    filters = resource_filters(args, required=False)
    everything = [AclBindingFilter()] if not filters else [AclBindingFilter(f) for f in filters]
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for flt in everything:
        for binding in describe_acls(client, flt):
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
    principals: list[str | None] = [*sorted(_principals(args.principal))] or [None]
    for principal in principals:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for pattern in sorted(by_pattern, key=str):
            found = {e for e in by_pattern[pattern] if principal in (None, e.principal)}
            if found:
                text = pattern_text(pattern)
                print(_block(f"Current ACLs for resource `{text}`: ", found))


def run(args: argparse.Namespace) -> int:
    """The action the parsed ``gregor acls`` arguments name; 1 on an error."""
    try:
        check_options(args)
        with Client(args.bootstrap_server, "gregor-acls", config=args.command_config) as client:
            if args.add:
                _add(client, args)
            elif args.remove:
                _remove(client, args)
            _list(client, args)  # after a change too, as kafka-acls.sh does
    except UsageError as e:
        print(e, file=sys.stderr)
        return 1
    except ClientError as e:
        print(f"Error while executing ACL command: {e}", file=sys.stderr)
        return 1
    return 0
