"""``gregor quotas``: describe and alter client quotas on any Kafka-compatible broker over
the wire (DescribeClientQuotas, AlterClientQuotas; KIP-546), what ``kafka-configs.sh
--entity-type users|clients`` does.

An entity is a user, a client id, or a (user, client id) pair, each part a name or the
default (``--user-default``, ``--client-default``), as in Kafka's precedence order."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.server.cli.output import print_json, print_table

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
USER, CLIENT_ID = "user", "client-id"
MATCH_EXACT, MATCH_DEFAULT = 0, 1
DEFAULT_NAME = "<default>"  # how Kafka's tools show a default entity

Entity = dict[str, str | None]  # entity type -> name; None is the type's default


def entity_of(args: Any) -> Entity:
    """The entity the options name (possibly none of its parts)."""
    entity: Entity = {}
    if args.user is not None or args.user_default:
        entity[USER] = args.user
    if args.client_id is not None or args.client_default:
        entity[CLIENT_ID] = args.client_id
    return entity


def describe_quotas(client: Client, entity: Entity) -> list[tuple[Entity, dict[str, float]]]:
    """Exactly ``entity``'s quotas, or every entity's when it names no part."""
    component = schema(DESCRIBE_CLIENT_QUOTAS, 0, "ComponentData")
    request = schema(DESCRIBE_CLIENT_QUOTAS, 0)(
        components=tuple(
            component(
                entity_type=kind,
                match_type=MATCH_DEFAULT if name is None else MATCH_EXACT,
                match=name,
            )
            for kind, name in entity.items()
        ),
        strict=bool(entity),
    )
    answer = client.call(request)
    if answer.error_code.value != 0:
        detail = f" ({answer.error_message})" if answer.error_message else ""
        raise ClientError(f"{answer.error_code.name.upper()}{detail}")
    entries = [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            {v.key: v.value for v in entry.values},
        )
        for entry in answer.entries or ()
    ]
    return sorted(entries, key=lambda e: (_shown(e[0], USER), _shown(e[0], CLIENT_ID)))


def alter_quotas(client: Client, entity: Entity, set_: dict[str, float], remove: list[str]) -> None:
    entity_data = schema(ALTER_CLIENT_QUOTAS, 0, "EntityData")
    op = schema(ALTER_CLIENT_QUOTAS, 0, "OpData")
    ops = [op(key=k, value=v, remove=False) for k, v in set_.items()]
    ops += [op(key=k, value=0.0, remove=True) for k in remove]
    request = schema(ALTER_CLIENT_QUOTAS, 0)(
        entries=(
            schema(ALTER_CLIENT_QUOTAS, 0, "EntryData")(
                entity=tuple(entity_data(entity_type=k, entity_name=n) for k, n in entity.items()),
                ops=tuple(ops),
            ),
        ),
        validate_only=False,
    )
    for entry in client.call(request).entries:
        if entry.error_code.value != 0:
            detail = f" ({entry.error_message})" if entry.error_message else ""
            raise ClientError(f"{entry.error_code.name.upper()}{detail}")


def _shown(entity: Entity, kind: str) -> str:
    if kind not in entity:
        return ""
    name = entity[kind]
    return DEFAULT_NAME if name is None else name


def entity_text(entity: Entity) -> str:
    parts = {USER: "user", CLIENT_ID: "client-id"}
    return ", ".join(f"{parts.get(kind, kind)} '{_shown(entity, kind)}'" for kind in entity)


def _number(text: str) -> str:
    value = float(text)
    return str(int(value)) if value.is_integer() else str(value)


def _rates(values: list[tuple[str, str]]) -> dict[str, float]:
    rates = {}
    for key, text in values:
        try:
            rates[key] = float(text)
        except ValueError:
            raise ClientError(f"quota {key} must be a number, got {text!r}") from None
    return rates


def run(args: argparse.Namespace) -> int:
    """The action the parsed ``gregor quotas`` arguments name; 1 on an error."""
    entity = entity_of(args)
    try:
        with Client(args.bootstrap_server, "gregor-quotas", config=args.command_config) as client:
            if args.describe:
                _describe(client, entity, args.json)
                return 0
            if not entity:
                raise ClientError("--alter needs --user, --client-id or their defaults")
            if not args.add_config and not args.delete_config:
                raise ClientError("--alter needs --add-config or --delete-config")
            alter_quotas(client, entity, _rates(args.add_config), args.delete_config)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"entity": entity, "result": "Altered"})
    else:
        print(f"Completed updating quotas for {entity_text(entity)}.")
    return 0


def _describe(client: Client, entity: Entity, as_json: bool) -> None:
    entries = describe_quotas(client, entity)
    if as_json:
        print_json({"quotas": [{"entity": e, "values": v} for e, v in entries]})
        return
    keys = sorted({k for _, values in entries for k in values})
    rows = [
        (_shown(e, USER) or None, _shown(e, CLIENT_ID) or None)
        + tuple(_number(str(values[k])) if k in values else None for k in keys)
        for e, values in entries
    ]
    print_table(["USER", "CLIENT-ID", *keys], rows)
