"""``gregor topics``: list, describe, create, delete and alter topics on any Kafka-compatible
broker over the wire, in the habits of ``kafka-topics.sh`` (``--alter`` also changes topic
configs, which Kafka leaves to ``kafka-configs.sh``)."""

from __future__ import annotations

import datetime
import json
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
) -> None:
    """CreateTopics v5 through the controller; -1 takes the broker's defaults."""
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
    _check(name, result.error_code, result.error_message)


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


def describe(client: Client, names: list[str] | None) -> list[dict[str, Any]]:
    """Topics (all when ``names`` is None, internal ones included) with their partitions."""
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


def run(args: Any) -> int:
    """The action the parsed ``gregor topics`` arguments name; 1 on an error."""
    out = sys.stdout
    try:
        with Client(args.bootstrap_server, "gregor-topics") as client:
            if args.list:
                names = [t["topic"] for t in describe(client, None)]
                if args.json:
                    json.dump({"topics": names}, out)
                    out.write("\n")
                else:
                    out.writelines(f"{n}\n" for n in names)
                return 0
            if args.describe:
                topics = describe(client, [args.topic] if args.topic else None)
                if args.json:
                    json.dump({"topics": topics}, out, indent=1)
                    out.write("\n")
                else:
                    print_described(topics, out)
                return 0
            if not args.topic:
                raise ClientError("--topic is required")
            done = _change(client, args)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump({"topic": args.topic, "result": done}, out)
        out.write("\n")
    else:
        out.write(f"{done} topic {args.topic}.\n")
    return 0


def _change(client: Client, args: Any) -> str:
    config = dict(args.config)
    if args.create:
        create_topic(client, args.topic, args.partitions, args.replication_factor, config)
        return "Created"
    if args.delete:
        delete_topic(client, args.topic)
        return "Deleted"
    if args.partitions == -1 and not config and not args.delete_config:
        raise ClientError("--alter needs --partitions, --config or --delete-config")
    if args.partitions != -1:
        set_partitions(client, args.topic, args.partitions)
    if config or args.delete_config:
        alter_configs(client, TOPIC, args.topic, config, args.delete_config)
    return "Altered"
