"""The ``gregor`` command line's grammar: every subcommand's options, in the habits of
Kafka's scripts (``kafka-topics.sh``, ``kafka-consumer-groups.sh``, ``kafka-configs.sh``,
the perf tests) and kcat. Only ``argparse`` here, so that ``gregor serve`` starts without
loading the tools; each subcommand names the module whose ``run(args)`` does its work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

_Commands = Any  # argparse's subparsers action has no public type


class _Version(argparse.Action):
    """``gregor --version``; the package metadata is read only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> None:
        from gregor import __version__

        print(f"gregor {__version__}")
        parser.exit()


class _Subcommand(argparse.ArgumentParser):
    """A subcommand's parser: an option it does not know is its error, shown with its usage
    (the root parser would otherwise report it with the top-level usage)."""

    # argparse's overloads (by namespace type) collapsed to the one form Gregor calls.
    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


class _Once(argparse.Action):
    """An option that may be given once: a second one is refused with ``why``, never
    silently the winner."""

    def __init__(self, option_strings: list[str], dest: str, *, why: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.why = why

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any, *_: Any
    ) -> None:
        if getattr(namespace, self.dest) is not None:
            raise argparse.ArgumentError(self, f"given more than once: {self.why}")
        setattr(namespace, self.dest, value)


def parse_key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must look like key=value, got {text!r}")
    return key.strip(), value.strip()


def parse_config_list(text: str) -> list[tuple[str, str]]:
    """``kafka-configs.sh``'s ``--add-config``: ``k1=v1,k2=[a,b]``; a bracketed value is a
    list (sent as ``a,b``)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            if text[start:i].strip():
                items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise argparse.ArgumentTypeError(f"unbalanced brackets in {text!r}")
    pairs = []
    for item in items:
        key, value = parse_key_value(item)
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs.append((key, value))
    return pairs


def parse_name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _parse_files(text: str) -> list[Path]:
    return [Path(p) for p in text.split(",") if p.strip()]


def _client_properties(text: str) -> dict[str, str]:
    """A Kafka client properties file, read when the option is parsed."""
    from gregor.server.config import read_properties  # only the tools need it

    try:
        return read_properties(Path(text))
    except (OSError, UnicodeDecodeError) as e:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {e}") from None


def _bootstrap(parser: argparse.ArgumentParser) -> None:
    """The options every tool talking to brokers takes."""
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="brokers"
    )
    parser.add_argument(
        "--command-config",
        type=_client_properties,
        metavar="FILE",
        help="Kafka client properties: security.protocol, ssl.*, sasl.*",
    )


def _json(parser: argparse.ArgumentParser, text: str = "JSON output, for scripts") -> None:
    parser.add_argument("--json", action="store_true", help=text)


def _actions(parser: argparse.ArgumentParser, actions: list[tuple[str, str]]) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    for name, text in actions:
        group.add_argument(name, action="store_true", help=text)


def _command(commands: _Commands, name: str, module: str, **kwargs: Any) -> Any:
    parser = commands.add_parser(name, **kwargs)
    parser.set_defaults(module=module)
    return parser


def _serve(commands: _Commands) -> None:
    serve = _command(
        commands,
        "serve",
        "gregor.server.cli.serve",
        help="run a broker (like kafka-server-start.sh)",
    )
    serve.add_argument("properties", nargs="?", type=Path, help="a server.properties file")
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        type=parse_key_value,
        metavar="key=value",
        help="set a property, overriding the file",
    )


def _dump_log(commands: _Commands) -> None:
    dump = _command(
        commands,
        "dump-log",
        "gregor.server.cli.dump_log",
        help="print log segment and index files (like kafka-dump-log.sh)",
        description="Reads .log, .index, .timeindex and .txnindex files directly (no broker).",
    )
    dump.add_argument(
        "--files",
        action="extend",
        type=_parse_files,
        required=True,
        metavar="FILE[,FILE...]",
        help="the files to dump, comma-separated (may be repeated)",
    )
    dump.add_argument(
        "--deep-iteration", action="store_true", help="list the records of every batch"
    )
    dump.add_argument(
        "--print-data-log",
        action="store_true",
        help="list the records with their keys, values and headers (implies --deep-iteration)",
    )
    _json(dump, "one JSON document, for scripts")


def _topics(commands: _Commands) -> None:
    topics = _command(
        commands,
        "topics",
        "gregor.server.cli.topics",
        help="list, describe, create, delete and alter topics (like kafka-topics.sh)",
        description="Talks to any Kafka-compatible broker over the wire.",
    )
    _bootstrap(topics)
    _actions(
        topics,
        [
            ("--list", "list the topics"),
            ("--describe", "describe --topic, or every topic"),
            ("--create", "create --topic"),
            ("--delete", "delete --topic"),
            ("--alter", "change --topic's partition count or configs"),
        ],
    )
    topics.add_argument(
        "--topic",
        action=_Once,
        why="name several topics with one regular expression, e.g. 'a|b' or 'a,b'",
        help="the topic; for --list, --describe, --alter and --delete a (Java) regular "
        "expression matched against whole names, ',' meaning '|' (escape a '.': 'my\\.topic')",
    )
    topics.add_argument(
        "--if-exists",
        action="store_true",
        help="alter, delete, describe: no error when --topic matches no topic",
    )
    topics.add_argument(
        "--if-not-exists", action="store_true", help="create: no error when the topic exists"
    )
    topics.add_argument(
        "--exclude-internal",
        action="store_true",
        help="list, describe: leave out internal topics (__consumer_offsets, ...)",
    )
    topics.add_argument(
        "--partitions", type=int, default=-1, help="partition count (create, alter)"
    )
    topics.add_argument(
        "--replication-factor", type=int, default=-1, help="replicas per partition (create)"
    )
    topics.add_argument(
        "--config",
        action="append",
        default=[],
        type=parse_key_value,
        metavar="key=value",
        help="a topic config to set (create, alter; may be repeated)",
    )
    topics.add_argument(
        "--delete-config", action="append", default=[], metavar="key", help="remove an override"
    )
    _json(topics)


def _groups(commands: _Commands) -> None:
    groups = _command(
        commands,
        "groups",
        "gregor.server.cli.groups",
        help="list, describe, reset offsets of and delete consumer and share groups "
        "(like kafka-consumer-groups.sh and kafka-share-groups.sh)",
        description="Talks to any Kafka-compatible broker over the wire. --reset-offsets "
        "prints the new offsets and changes nothing unless --execute is given; the group "
        "must have no active members. Share groups (--type share) have start offsets "
        "instead of committed ones.",
    )
    _bootstrap(groups)
    _actions(
        groups,
        [
            ("--list", "list the groups"),
            ("--describe", "describe --group(s): committed offsets, log end offsets and lag"),
            ("--reset-offsets", "reset --group's committed offsets (a dry run unless --execute)"),
            ("--delete", "delete --group(s)"),
            ("--delete-offsets", "delete a share --group's offsets of --topic(s)"),
        ],
    )
    groups.add_argument("--group", action="append", default=[], help="a group (may be repeated)")
    groups.add_argument("--all-groups", action="store_true", help="every group")
    view = groups.add_mutually_exclusive_group()
    view.add_argument(
        "--members", action="store_true", help="describe: the members and their partitions"
    )
    view.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATE[,STATE...]",
        help="list: each group's state (only groups in these states, if given); describe: "
        "each group's state",
    )
    groups.add_argument(
        "--type",
        nargs="?",
        const="",
        metavar="TYPE[,TYPE...]",
        help="list: each group's type, classic, consumer or share (only these types, if given)",
    )
    groups.add_argument(
        "--verbose",
        action="store_true",
        help="describe --members: member epochs and assignments; describe --state: the "
        "group and target assignment epochs",
    )
    groups.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,P...]",
        help="reset-offsets, delete-offsets: a topic, or some of its partitions (may be repeated)",
    )
    groups.add_argument(
        "--all-topics",
        action="store_true",
        help="reset-offsets: every topic the group has committed (share group: start) offsets for",
    )
    to = groups.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    to.add_argument("--to-latest", action="store_true", help="reset to the log end")
    to.add_argument(
        "--to-current",
        action="store_true",
        help="reset to the committed offset (the log end where there is none)",
    )
    to.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    to.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="reset to the first offset at or after this time (local time unless it "
        "names a zone, e.g. Z or +01:00)",
    )
    to.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="reset to the first offset at or after this long ago (ISO-8601, e.g. PT1H30M)",
    )
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="move the committed offsets by N (may be <0)"
    )
    run = groups.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="show the new offsets (default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    _json(groups)


def _configs(commands: _Commands) -> None:
    configs = _command(
        commands,
        "configs",
        "gregor.server.cli.configs",
        help="describe and alter topic, broker, group and user configs (like kafka-configs.sh)",
        description="Talks to any Kafka-compatible broker over the wire; --alter uses "
        "IncrementalAlterConfigs. Users: quotas and SCRAM credentials "
        "(--add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'), as kafka-configs.sh "
        "manages them. Client quotas are `gregor quotas`.",
    )
    _bootstrap(configs)
    _actions(
        configs,
        [
            ("--describe", "show the entity's dynamic configs (--all: every config)"),
            ("--alter", "set (--add-config) and remove (--delete-config) configs"),
        ],
    )
    configs.add_argument(
        "--entity-type", required=True, choices=["topics", "brokers", "groups", "users"]
    )
    entity = configs.add_mutually_exclusive_group()
    entity.add_argument("--entity-name", help="the topic, broker id, group or user")
    entity.add_argument(
        "--entity-default",
        action="store_true",
        help="brokers: the cluster-wide default every broker falls back to; users: the "
        "default user's quotas",
    )
    configs.add_argument(
        "--all", action="store_true", help="describe: every config, not just the dynamic ones"
    )
    configs.add_argument(
        "--add-config",
        action="extend",
        default=[],
        type=parse_config_list,
        metavar="k1=v1,k2=[v1,v2]",
        help="configs to set (may be repeated)",
    )
    configs.add_argument(
        "--delete-config",
        action="extend",
        default=[],
        type=parse_name_list,
        metavar="k1,k2",
        help="configs to remove (may be repeated)",
    )
    _json(configs)


def _quotas(commands: _Commands) -> None:
    quotas = _command(
        commands,
        "quotas",
        "gregor.server.cli.quotas",
        help="describe and alter client quotas (kafka-configs.sh --entity-type users|clients)",
        description="Quotas belong to a user, a client id, or a (user, client id) pair; "
        "--user-default and --client-default name the defaults. --describe with no "
        "entity lists every quota.",
    )
    _bootstrap(quotas)
    _actions(
        quotas,
        [
            ("--describe", "show the quotas of the entity, or every quota"),
            ("--alter", "set (--add-config) and remove (--delete-config) quotas"),
        ],
    )
    user = quotas.add_mutually_exclusive_group()
    user.add_argument("--user", help="a user principal's name")
    user.add_argument("--user-default", action="store_true", help="the default user")
    client = quotas.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="a client id")
    client.add_argument("--client-default", action="store_true", help="the default client id")
    quotas.add_argument(
        "--add-config",
        action="extend",
        default=[],
        type=parse_config_list,
        metavar="producer_byte_rate=N,...",
        help="quotas to set: producer_byte_rate, consumer_byte_rate, request_percentage",
    )
    quotas.add_argument(
        "--delete-config",
        action="extend",
        default=[],
        type=parse_name_list,
        metavar="k1,k2",
        help="quotas to remove",
    )
    _json(quotas)


def _acls(commands: _Commands) -> None:
    acls = _command(
        commands,
        "acls",
        "gregor.server.cli.acls",
        help="add, remove and list ACLs (kafka-acls.sh)",
        description="ACLs on topics, groups, the cluster and transactional ids, as "
        "kafka-acls.sh: --allow-principal/--deny-principal with --operation (default All) "
        "and hosts (default *), or the --producer/--consumer conveniences.",
    )
    _bootstrap(acls)
    _actions(
        acls,
        [
            ("--add", "add the ACLs"),
            ("--remove", "remove the ACLs (all of the resources' without principals)"),
            ("--list", "list the ACLs of the resources, or every ACL"),
        ],
    )
    for name, text in (
        ("--topic", "a topic (or prefix)"),
        ("--group", "a consumer group (or prefix)"),
        ("--transactional-id", "a transactional id (or prefix)"),
        ("--allow-principal", "a principal to allow, e.g. User:alice"),
        ("--deny-principal", "a principal to deny"),
        ("--allow-host", "a host the allowed principals may connect from (default *)"),
        ("--deny-host", "a host the denied principals are denied from (default *)"),
        ("--operation", "Read, Write, Create, Describe, Alter, All, ... (default All)"),
        ("--principal", "--list: only this principal's ACLs"),
    ):
        acls.add_argument(name, action="append", default=[], help=text)
    acls.add_argument("--cluster", action="store_true", help="the cluster resource")
    acls.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=["literal", "prefixed", "any", "match"],
        help="the resources' pattern type, or for --list/--remove a filter (default literal)",
    )
    acls.add_argument(
        "--producer", action="store_true", help="Write, Describe, Create on the topics"
    )
    acls.add_argument(
        "--consumer", action="store_true", help="Read, Describe on the topics, Read on the groups"
    )
    acls.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster"
    )
    acls.add_argument("--force", action="store_true", help="remove without asking")


_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]  # wire.compression.CODEC_NAMES


def _acks(text: str) -> int:
    value = -1 if text == "all" else int(text)
    if value not in (-1, 0, 1):
        raise argparse.ArgumentTypeError("acks must be all, -1, 0 or 1")
    return value


def parse_property(text: str) -> tuple[str, str]:
    """Kafka's ``--property``/``--*-property`` ``key=value``: split at the first ``=``, the
    value kept as given (a separator may be a blank or a tab) and may be empty."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must look like key=value, got {text!r}")
    return key.strip(), value


def _properties(parser: argparse.ArgumentParser, names: tuple[str, ...], text: str) -> None:
    parser.add_argument(
        *names,
        action="append",
        default=[],
        type=parse_property,
        metavar="key=value",
        help=text + " (may be repeated)",
    )


def _topic_once(parser: argparse.ArgumentParser, why: str) -> None:
    parser.add_argument("--topic", action=_Once, why=why, required=True)


# Their defaults (None here) are the client's, or what --producer-property says:
# server/cli/client_configs.py.
def _producer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--acks", type=_acks, metavar="all|1|0", help="acks (default all)")
    parser.add_argument("--compression-type", choices=_CODECS, help="default none")
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="BYTES",
        help="the most record bytes per batch (default 16384, Kafka's batch.size)",
    )
    parser.add_argument(
        "--linger-ms",
        type=int,
        help="how long a batch waits for more records (default 5, Kafka's linger.ms)",
    )


def _produce(commands: _Commands) -> None:
    produce = _command(
        commands,
        "produce",
        "gregor.server.cli.produce",
        help="send standard input's lines to a topic, one record each (like kcat -P)",
        description="Keyed records go to the partition the Java client would pick (murmur2); "
        "keyless ones to one partition per batch, in turn. Prints nothing on success.",
    )
    _bootstrap(produce)
    _topic_once(produce, "gregor produce writes to one topic")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument(
        "--key-separator",
        metavar="SEP",
        help="each line is KEY SEP VALUE (split at the first SEP; kcat -K); the same as "
        "--property parse.key=true --property key.separator=SEP",
    )
    _properties(
        produce,
        ("--property", "--reader-property"),
        "kafka-console-producer.sh's line reader: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, ignore.error, null.marker",
    )
    _properties(
        produce,
        ("--producer-property", "--command-property"),
        "a producer config: acks, compression.type, batch.size, linger.ms, client.id",
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        type=parse_key_value,
        metavar="key=value",
        help="a header on every record (may be repeated; kcat -H)",
    )
    _json(
        produce,
        'each line is a JSON record as `gregor consume --json` prints it: {"key", "value", '
        '"headers", "partition", "timestamp"}, all optional but value',
    )
    _producer_options(produce)


def _consume(commands: _Commands) -> None:
    consume = _command(
        commands,
        "consume",
        "gregor.server.cli.consume",
        help="print a topic's records (like kcat -C / kafka-console-consumer.sh)",
        description="Reads every partition (or --partition) from the log end, "
        "--from-beginning or --offset; with --group as a member of a consumer group, from "
        "its committed offsets, committing what it printed. Stops at --max-messages, "
        "--exit-at-end, --timeout-ms of silence, or Ctrl-C.",
    )
    _bootstrap(consume)
    _topic_once(consume, "gregor consume reads one topic")
    consume.add_argument("--partition", type=int, help="only this partition")
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        action="store_true",
        default=None,
        help="start at the log start (or, with --group, where the group has no committed offset)",
    )
    start.add_argument("--offset", type=int, help="start at this offset (with --partition)")
    consume.add_argument("--group", help="consume as a member of this consumer group")
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument(
        "--exit-at-end",
        "-e",
        action="store_true",
        help="stop once every partition is read to its end (kcat -e)",
    )
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrives for this long")
    consume.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        help="default read_uncommitted",
    )
    output = consume.add_mutually_exclusive_group()
    output.add_argument(
        "--format",
        "-f",
        help="kcat's format instead of Kafka's: %%s value, %%k key, %%t topic, %%p partition, "
        "%%o offset, %%T timestamp, %%h headers, %%S value size, %%K key size, \\n \\t",
    )
    output.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per record (keys and values as text, else base64)",
    )
    _properties(
        consume,
        ("--property", "--formatter-property"),
        "kafka-console-consumer.sh's formatter: print.key, print.value, print.timestamp, "
        "print.partition, print.offset, print.headers, key.separator, line.separator, "
        "headers.separator, null.literal",
    )
    _properties(
        consume,
        ("--consumer-property", "--command-property"),
        "a consumer config: group.id, auto.offset.reset, isolation.level, enable.auto.commit, "
        "auto.commit.interval.ms, client.id",
    )


def _perf(commands: _Commands) -> None:
    perf = commands.add_parser(
        "perf",
        help="producer and consumer performance tests (like kafka-*-perf-test.sh)",
    )
    modes = perf.add_subparsers(dest="mode", required=True)
    produce = _command(
        modes,
        "produce",
        "gregor.server.cli.perf",
        help="produce --num-records records of --record-size bytes at --throughput",
        description="Like kafka-producer-perf-test.sh: one fixed random payload, batches "
        "pipelined (--max-in-flight per broker); latency from a record's send time (its "
        "turn under --throughput) to its acknowledgement. MB/s counts record values.",
    )
    _bootstrap(produce)
    _topic_once(produce, "gregor perf produce writes to one topic")
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, required=True, metavar="BYTES")
    produce.add_argument(
        "--throughput",
        type=float,
        required=True,
        help="records per second at most; -1 for no limit",
    )
    produce.add_argument("--max-in-flight", type=int, default=5, help="requests per broker")
    _producer_options(produce)
    _json(produce, "print the summary as JSON (no progress bar)")

    consume = _command(
        modes,
        "consume",
        "gregor.server.cli.perf",
        help="consume --num-records records from the start of a topic",
        description="Like kafka-consumer-perf-test.sh: every partition from its log start "
        "until --num-records records; latency is each fetch's round trip. MB/s counts the "
        "record batches fetched.",
    )
    _bootstrap(consume)
    _topic_once(consume, "gregor perf consume reads one topic")
    consume.add_argument("--num-records", type=int, required=True)
    consume.add_argument(
        "--fetch-size",
        type=int,
        default=1024 * 1024,
        metavar="BYTES",
        help="the most bytes per partition per fetch (default 1 MiB)",
    )
    consume.add_argument(
        "--timeout-ms",
        type=int,
        default=10000,
        help="give up when no record arrives for this long (default 10000)",
    )
    _json(consume, "print the summary as JSON (no progress bar)")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="gregor", description="A Kafka-compatible broker.")
    root.add_argument("--version", action=_Version, help="print the version and exit")
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Subcommand)
    for add in (_serve, _dump_log, _topics, _groups, _configs, _quotas, _acls, _produce, _consume):
        add(commands)
    _perf(commands)
    return root
