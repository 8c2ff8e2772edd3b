"""``gregor topics``: list, describe, create, delete and alter topics on any Kafka-compatible
broker over the wire, in the habits of ``kafka-topics.sh`` (``--alter`` also changes topic
configs, which Kafka leaves to ``kafka-configs.sh``). As in Kafka's tool, ``--topic`` is a
regular expression except for ``--create``, and ``--if-exists``, ``--if-not-exists`` and
``--exclude-internal`` go with the actions Kafka's tool takes them with."""

from __future__ import annotations

import datetime
import json
import re
import sys
from typing import IO, Any

from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.server.cli.configs import TOPIC, alter_configs, describe_configs

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
_TIMEOUT = datetime.timedelta(seconds=30)


def _check(name: str, error_code: Any, message: str | None = None) -> None:
    if error_code.value != 0:
        detail = f" ({message})" if message else ""
        raise ClientError(f"topic {name!r}: {error_code.name.upper()}{detail}")


def create_topic(
    client: Client,
    name: str,
    partitions: int = -1,
    replication_factor: int = -1,
    config: dict[str, str] | None = None,
    *,
    if_not_exists: bool = False,
) -> bool:
    """CreateTopics v5 through the controller; -1 takes the broker's defaults. False when
    the topic existed and ``if_not_exists`` says that is no error."""
    topic = schema(CREATE_TOPICS, 5, "CreatableTopic")
    entry = schema(CREATE_TOPICS, 5, "CreatableTopicConfig")
    request = schema(CREATE_TOPICS, 5)(
        topics=(
            topic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=(),
                configs=tuple(entry(name=k, value=v) for k, v in (config or {}).items()),
            ),
        ),
        timeout=_TIMEOUT,
        validate_only=False,
    )
    result = client.call_controller(request).topics[0]
    if if_not_exists and result.error_code.name == "topic_already_exists":
        return False
    _check(name, result.error_code, result.error_message)
    return True


def delete_topic(client: Client, name: str) -> None:
    request = schema(DELETE_TOPICS, 4)(topic_names=(name,), timeout=_TIMEOUT)
    result = client.call_controller(request).responses[0]
    _check(name, result.error_code)


def set_partitions(client: Client, name: str, count: int) -> None:
    topic = schema(CREATE_PARTITIONS, 2, "CreatePartitionsTopic")
    request = schema(CREATE_PARTITIONS, 2)(
        topics=(topic(name=name, count=count, assignments=None),),
        timeout=_TIMEOUT,
        validate_only=False,
    )
    result = client.call_controller(request).results[0]
    _check(name, result.error_code, result.error_message)


def topic_overrides(client: Client, names: list[str]) -> dict[str, dict[str, str | None]]:
    """Each topic's own config overrides (what ``kafka-topics.sh --describe`` shows)."""
    described = describe_configs(client, TOPIC, names, synonyms=False)
    return {
        name: {e.name: e.value for e in entries if e.source == "DYNAMIC_TOPIC_CONFIG"}
        for name, entries in described.items()
    }


def topic_pattern(text: str) -> re.Pattern[str]:
    """kafka-topics.sh's ``--topic`` as its TopicFilter reads it: blanks and surrounding
    quotes dropped, ``,`` meaning ``|``, then a Java regular expression that must match the
    whole name (Python's ``re`` reads the ones names need alike). A plain name matches
    itself, and a ``.`` in it any character (``my\\.topic`` matches only ``my.topic``)."""
    regex = text.strip().replace(",", "|").replace(" ", "")
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", regex))
    try:
        return re.compile(regex)
    except re.error:
        raise ClientError(f"{regex} is an invalid regex.") from None


def matching_topics(client: Client, pattern: str | None, exclude_internal: bool) -> list[str]:
    """The names of the topics ``pattern`` matches (every one without a pattern), in name
    order; with ``exclude_internal`` none of the internal ones."""
    regex = topic_pattern(pattern) if pattern else None
    return sorted(
        t.name
        for t in client.metadata(None).topics
        if not (exclude_internal and t.is_internal) and (regex is None or regex.fullmatch(t.name))
    )


def describe(client: Client, names: list[str]) -> list[dict[str, Any]]:
    """The named topics with their partitions and config overrides."""
    if not names:
        return []
    topics = []
    for t in client.metadata(names).topics:
        _check(t.name, t.error_code)
        partitions = sorted(t.partitions, key=lambda p: p.partition_index)
        topics.append(
            {
                "topic": t.name,
                "internal": t.is_internal,
                "partitionCount": len(partitions),
                "replicationFactor": len(partitions[0].replica_nodes) if partitions else 0,
                "partitions": [
                    {
                        "partition": p.partition_index,
                        "leader": p.leader_id,
                        "leaderEpoch": p.leader_epoch,
                        "replicas": list(p.replica_nodes),
                        "isr": list(p.isr_nodes),
                        "offline": list(p.offline_replicas),
                    }
                    for p in partitions
                ],
            }
        )
    topics.sort(key=lambda t: t["topic"])
    overrides = topic_overrides(client, [t["topic"] for t in topics])
    for t in topics:
        t["configs"] = overrides.get(t["topic"], {})
    return topics


def _nodes(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)


def print_described(topics: list[dict[str, Any]], out: IO[str]) -> None:
    """As kafka-topics.sh --describe prints them."""
    for t in topics:
        configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        out.write(
            f"Topic: {t['topic']}\tPartitionCount: {t['partitionCount']}\t"
            f"ReplicationFactor: {t['replicationFactor']}\tConfigs: {configs}\n"
        )
        for p in t["partitions"]:
            line = (
                f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: "
                f"{p['leader'] if p['leader'] >= 0 else 'none'}\tReplicas: "
                f"{_nodes(p['replicas'])}\tIsr: {_nodes(p['isr'])}"
            )
            if p["offline"]:
                line += f"\tOffline: {_nodes(p['offline'])}"
            out.write(line + "\n")


_ONLY_WITH = {  # kafka-topics.sh's checks of which action an option goes with
    "if_exists": ("--if-exists", ("alter", "delete", "describe")),
    "if_not_exists": ("--if-not-exists", ("create",)),
    "exclude_internal": ("--exclude-internal", ("list", "describe")),
}


def _check_options(args: Any) -> None:
    for dest, (option, actions) in _ONLY_WITH.items():
        if getattr(args, dest) and not any(getattr(args, a) for a in actions):
            raise ClientError(f"{option} goes with --{', --'.join(actions)} only")
    if not (args.list or args.describe or args.topic):
        raise ClientError("--topic is required")


def run(args: Any) -> int:
    """The action the parsed ``gregor topics`` arguments name; 1 on an error."""
    out = sys.stdout
    try:
        _check_options(args)
        with Client(args.bootstrap_server, "gregor-topics", config=args.command_config) as client:
            if args.create:
                created = create_topic(
                    client,
                    args.topic,
                    args.partitions,
                    args.replication_factor,
                    dict(args.config),
                    if_not_exists=args.if_not_exists,
                )
                _print_done(out, args, [args.topic] if created else [], "Created")
                return 0
            names = matching_topics(client, args.topic, args.exclude_internal)
            if args.topic and not names and not (args.list or args.if_exists):
                raise ClientError(f"Topic '{args.topic}' does not exist as expected")
            if args.list:
                if args.json:
                    json.dump({"topics": names}, out)
                    out.write("\n")
                else:
                    out.writelines(f"{n}\n" for n in names)
            elif args.describe:
                topics = describe(client, names)
                if args.json:
                    json.dump({"topics": topics}, out, indent=1)
                    out.write("\n")
                else:
                    print_described(topics, out)
            elif args.delete:
                for name in names:
                    delete_topic(client, name)
                    _print_done(out, args, [name], "Deleted")
            else:
                _alter(client, args, names, out)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


def _print_done(out: IO[str], args: Any, names: list[str], done: str) -> None:
    """One line per topic changed; with --json one JSON object per line."""
    for name in names:
        if args.json:
            json.dump({"topic": name, "result": done}, out)
            out.write("\n")
        else:
            out.write(f"{done} topic {name}.\n")


def _alter(client: Client, args: Any, names: list[str], out: IO[str]) -> None:
    config = dict(args.config)
    if args.partitions == -1 and not config and not args.delete_config:
        raise ClientError("--alter needs --partitions, --config or --delete-config")
    for name in names:
        if args.partitions != -1:
            set_partitions(client, name, args.partitions)
        if config or args.delete_config:
            alter_configs(client, TOPIC, name, config, args.delete_config)
        _print_done(out, args, [name], "Altered")
