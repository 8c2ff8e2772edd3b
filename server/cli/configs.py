"""``gregor configs``: describe and alter topic, broker and group configs on any
Kafka-compatible broker over the wire, in the habits of ``kafka-configs.sh``
(DescribeConfigs; IncrementalAlterConfigs for ``--alter``); users' quotas and SCRAM
credentials are ``user_configs.py``'s."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from gregor.server.cli import user_configs
from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.server.cli.groups import list_groups
from gregor.server.cli.output import print_json

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC, BROKER, GROUP = 2, 4, 32  # Kafka's ConfigResource types
RESOURCE_TYPES = {"topics": TOPIC, "brokers": BROKER, "groups": GROUP}
SOURCES = [
    "UNKNOWN",
    "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "STATIC_BROKER_CONFIG",
    "DEFAULT_CONFIG",
    "DYNAMIC_BROKER_LOGGER_CONFIG",
    "CLIENT_METRICS_CONFIG",
    "GROUP_CONFIG",
]
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
_NOUNS = {TOPIC: "topic", BROKER: "broker", GROUP: "group"}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None  # None when sensitive
    source: str
    sensitive: bool
    read_only: bool
    synonyms: list[tuple[str, str | None, str]]  # (name, value, source), strongest first

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "sensitive": self.sensitive,
            "readOnly": self.read_only,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in self.synonyms],
        }


def source_name(source: int) -> str:
    return SOURCES[source] if 0 <= source < len(SOURCES) else "UNKNOWN"


def dynamic_source(resource_type: int, name: str) -> str:
    """The source of an entity's own settings: what ``--describe`` without ``--all`` shows."""
    if resource_type == TOPIC:
        return "DYNAMIC_TOPIC_CONFIG"
    if resource_type == GROUP:
        return "GROUP_CONFIG"
    return "DYNAMIC_DEFAULT_BROKER_CONFIG" if name == "" else "DYNAMIC_BROKER_CONFIG"


def _check(resource_type: int, name: str, error_code: Any, message: str | None) -> None:
    if error_code.value != 0:
        detail = f" ({message})" if message else ""
        raise ClientError(f"{entity_text(resource_type, name)}: {error_code.name.upper()}{detail}")


def entity_text(resource_type: int, name: str) -> str:
    if resource_type == BROKER and name == "":
        return "the brokers' default"
    return f"{_NOUNS[resource_type]} {name!r}"


def _connection(client: Client, resource_type: int, name: str) -> Any:
    """A broker's own configs are its to answer and change, as in Kafka; the rest any
    broker's."""
    if resource_type == BROKER and name != "":
        if not name.isdigit():
            raise ClientError(f"a broker is named by its id, got {name!r}")
        return client.node(int(name), client.metadata([]).brokers)
    return client.bootstrap()


def describe_configs(
    client: Client, resource_type: int, names: list[str], *, synonyms: bool = True
) -> dict[str, list[ConfigEntry]]:
    """Every config of each entity, by entity name: one request for all topics or groups,
    one per broker for brokers."""
    resource = schema(DESCRIBE_CONFIGS, 4, "DescribeConfigsResource")
    per_connection: dict[Any, list[str]] = {}
    for name in names:
        per_connection.setdefault(_connection(client, resource_type, name), []).append(name)
    result: dict[str, list[ConfigEntry]] = {}
    for connection, some in per_connection.items():
        request = schema(DESCRIBE_CONFIGS, 4)(
            resources=tuple(
                resource(resource_type=resource_type, resource_name=n, configuration_keys=None)
                for n in some
            ),
            include_synonyms=synonyms,
            include_documentation=False,
        )
        for answer in connection.call(request).results:
            name = answer.resource_name
            _check(resource_type, name, answer.error_code, answer.error_message)
            result[name] = [_entry(c) for c in answer.configs]
    return {name: result[name] for name in names}


def _entry(config: Any) -> ConfigEntry:
    hidden = config.is_sensitive
    return ConfigEntry(
        name=config.name,
        value=None if hidden else config.value,
        source=source_name(config.config_source),
        sensitive=hidden,
        read_only=config.read_only,
        synonyms=[
            (s.name, None if hidden else s.value, source_name(s.source)) for s in config.synonyms
        ],
    )


def alter_configs(
    client: Client, resource_type: int, name: str, set_: dict[str, str], delete: list[str]
) -> None:
    entry = schema(INCREMENTAL_ALTER_CONFIGS, 1, "AlterableConfig")
    resource = schema(INCREMENTAL_ALTER_CONFIGS, 1, "AlterConfigsResource")
    changes = [entry(name=k, config_operation=_SET, value=v) for k, v in set_.items()]
    changes += [entry(name=k, config_operation=_DELETE, value=None) for k in delete]
    request = schema(INCREMENTAL_ALTER_CONFIGS, 1)(
        resources=(
            resource(resource_type=resource_type, resource_name=name, configs=tuple(changes)),
        ),
        validate_only=False,
    )
    (answer,) = _connection(client, resource_type, name).call(request).responses
    _check(resource_type, name, answer.error_code, answer.error_message)


def _all_names(client: Client, resource_type: int) -> list[str]:
    if resource_type == TOPIC:
        return sorted(t.name for t in client.metadata(None).topics)
    if resource_type == BROKER:
        return sorted((str(b.node_id) for b in client.metadata([]).brokers), key=int)
    return [g.group for g in list_groups(client)]


def _heading(resource_type: int, name: str, everything: bool) -> str:
    if resource_type == BROKER and name == "":
        kind = "All" if everything else "Default"
        return f"{kind} configs for brokers in the cluster are:"
    kind = "All" if everything else "Dynamic"
    return f"{kind} configs for {_NOUNS[resource_type]} {name} are:"


def _entry_line(entry: ConfigEntry) -> str:
    synonyms = ", ".join(f"{source}:{name}={value}" for name, value, source in entry.synonyms)
    return (
        f"  {entry.name}={entry.value} sensitive={str(entry.sensitive).lower()} "
        f"synonyms={{{synonyms}}}"
    )


def run(args: argparse.Namespace) -> int:
    """The action the parsed ``gregor configs`` arguments name; 1 on an error."""
    if args.entity_type == "users":
        return user_configs.run(args)
    resource_type = RESOURCE_TYPES[args.entity_type]
    if args.entity_default and resource_type != BROKER:
        print("Error: --entity-default is for --entity-type brokers", file=sys.stderr)
        return 1
    name = "" if args.entity_default else args.entity_name
    try:
        with Client(args.bootstrap_server, "gregor-configs", config=args.command_config) as client:
            if args.describe:
                _describe(client, resource_type, name, args)
                return 0
            if name is None:
                raise ClientError("--alter needs --entity-name or --entity-default")
            if not args.add_config and not args.delete_config:
                raise ClientError("--alter needs --add-config or --delete-config")
            alter_configs(client, resource_type, name, dict(args.add_config), args.delete_config)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"entityType": args.entity_type, "entityName": name, "result": "Altered"})
    elif name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {_NOUNS[resource_type]} {name}.")
    return 0


def _describe(client: Client, resource_type: int, name: str | None, args: Any) -> None:
    names = [name] if name is not None else _all_names(client, resource_type)
    described = describe_configs(client, resource_type, names)
    shown = {
        n: [e for e in entries if args.all or e.source == dynamic_source(resource_type, n)]
        for n, entries in described.items()
    }
    if args.json:
        print_json(
            {
                "entityType": args.entity_type,
                "entities": [
                    {"entityName": n, "configs": [e.to_json() for e in entries]}
                    for n, entries in shown.items()
                ],
            }
        )
        return
    for n, entries in shown.items():
        print(_heading(resource_type, n, args.all))
        for entry in sorted(entries, key=lambda e: e.name):
            print(_entry_line(entry))
