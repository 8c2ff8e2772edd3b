"""``gregor groups``: list, describe (committed offsets, log end offsets, lag, members),
reset the offsets of and delete consumer groups on any Kafka-compatible broker over the
wire, in the habits of ``kafka-consumer-groups.sh``: classic groups and those of the
consumer protocol (KIP-848), which ConsumerGroupDescribe describes (with member epochs and
target assignments) where DescribeGroups reports them Dead. Share groups (KIP-932) as
``kafka-share-groups.sh`` has them: listed with ``--type share``, described by
ShareGroupDescribe with their start offsets and lag, their start offsets reset
(AlterShareGroupOffsets) and deleted (``--delete-offsets``, DeleteShareGroupOffsets)."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gregor.server.cli.client.connection import Client, ClientError, Connection, schema
from gregor.server.cli.client.consumer_protocol import PROTOCOL_TYPE, assigned_partitions
from gregor.server.cli.client.records import (
    EARLIEST,
    LATEST,
    ClusterView,
    TopicPartition,
    by_topic,
    error_name,
    list_offsets,
)
from gregor.server.cli.client.share_offsets import (
    StartOffset,
    alter_start_offsets,
    delete_start_offsets,
    start_offsets,
)
from gregor.server.cli.output import print_json, print_table

OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 8, 9, 15, 16, 42
API_VERSIONS, CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE = 18, 69, 77
GROUP_ID_NOT_FOUND = 69
# --type values (Kafka's GroupType names): kafka-consumer-groups.sh's, and share groups.
GROUP_TYPES = {"classic": "Classic", "consumer": "Consumer", "share": "Share"}
SHARE = "share"  # a share group's type and protocol type
INACTIVE = ("Empty", "Dead")  # the states in which a group's offsets may be reset
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group: str
    state: str
    protocol_type: str
    group_type: str | None = None  # "classic", "consumer", "share"; None: not asked (v4)


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    partitions: list[TopicPartition]
    # A consumer-protocol member's: its epoch and its target assignment.
    member_epoch: int | None = None
    target: list[TopicPartition] = field(default_factory=list)


@dataclass(slots=True)
class Group:
    group: str
    state: str
    protocol_type: str
    protocol: str  # the assignor of a consumer-protocol group
    coordinator: Connection
    members: list[Member] = field(default_factory=list)
    group_type: str = "classic"
    group_epoch: int | None = None  # a consumer-protocol group's epochs
    assignment_epoch: int | None = None

    def owner(self, tp: TopicPartition) -> Member | None:
        return next((m for m in self.members if tp in m.partitions), None)


def list_groups(
    client: Client, states: tuple[str, ...] = (), types: tuple[str, ...] | None = None
) -> list[ListedGroup]:
    """The consumer groups of every broker (each lists the groups it coordinates) in
    ``states`` (any when empty); groups of other protocols (Connect's, for one) are left
    out, as Kafka's tool does. With ``types`` (ListGroups v5, Kafka 3.8+; empty: every
    type) each group's type is asked and filtered by, share groups among them."""
    if types is None:
        request = schema(LIST_GROUPS, 4)(states_filter=states)
    else:
        request = schema(LIST_GROUPS, 5)(
            states_filter=states, types_filter=types or tuple(GROUP_TYPES)
        )
    groups: dict[str, ListedGroup] = {}
    for broker in client.all_brokers():
        answer = broker.call(request)
        if answer.error_code.value != 0:
            raise ClientError(f"ListGroups on {broker.address}: {error_name(answer.error_code)}")
        for g in answer.groups:
            share = types is not None and g.protocol_type == SHARE
            if g.protocol_type in (PROTOCOL_TYPE, "") or share:
                group_type = getattr(g, "group_type", None)
                groups[g.group_id] = ListedGroup(
                    g.group_id, g.group_state, g.protocol_type, group_type
                )
    return sorted(groups.values(), key=lambda g: g.group)


def describe_group(client: Client, group: str) -> Group:
    """The group's state and members (DescribeGroups through its coordinator, else
    ConsumerGroupDescribe for a consumer-protocol group, ShareGroupDescribe for a share
    group); a group that does not exist is "Dead", as Kafka reports it."""
    request = schema(DESCRIBE_GROUPS, 5)(groups=(group,), include_authorized_operations=False)
    (described,) = client.call_coordinator(group, request).groups
    if described.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(described.error_code)}")
    if described.group_state == "Dead" and _serves(
        client.coordinator(group), CONSUMER_GROUP_DESCRIBE
    ):
        modern = _describe_consumer_group(client, group)
        if modern is not None:
            return modern
        if _serves(client.coordinator(group), SHARE_GROUP_DESCRIBE):
            share = _describe_share_group(client, group)
            if share is not None:
                return share
    consumer = described.protocol_type == PROTOCOL_TYPE
    members = [
        Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            assigned_partitions(m.member_assignment) if consumer else [],
        )
        for m in described.members
    ]
    return Group(
        group,
        described.group_state,
        described.protocol_type,
        described.protocol_data,
        client.coordinator(group),  # the one that answered
        sorted(members, key=lambda m: m.member_id),
    )


def _serves(broker: Connection, api_key: int) -> bool:
    answer = broker.call(schema(API_VERSIONS, 0)())
    return any(k.api_key == api_key for k in answer.api_keys)


def _describe_consumer_group(client: Client, group: str) -> Group | None:
    """A consumer-protocol group as ConsumerGroupDescribe tells it; None if there is none."""
    request = schema(CONSUMER_GROUP_DESCRIBE, 0)(
        group_ids=(group,), include_authorized_operations=False
    )
    (described,) = client.call_coordinator(group, request).groups
    if described.error_code.value == GROUP_ID_NOT_FOUND:
        return None
    if described.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(described.error_code)}")

    def partitions(assignment: Any) -> list[TopicPartition]:
        return sorted((t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions)

    members = [
        Member(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            partitions(m.assignment),
            m.member_epoch,
            partitions(m.target_assignment),
        )
        for m in described.members
    ]
    return Group(
        group,
        described.group_state,
        PROTOCOL_TYPE,
        described.assignor_name,
        client.coordinator(group),
        sorted(members, key=lambda m: m.member_id),
        "consumer",
        described.group_epoch,
        described.assignment_epoch,
    )


def _describe_share_group(client: Client, group: str) -> Group | None:
    """A share group as ShareGroupDescribe tells it (a member's target is its assignment:
    share groups have no revocation); None if there is none."""
    request = schema(SHARE_GROUP_DESCRIBE, 1)(
        group_ids=(group,), include_authorized_operations=False
    )
    (described,) = client.call_coordinator(group, request).groups
    if described.error_code.value == GROUP_ID_NOT_FOUND:
        return None
    if described.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(described.error_code)}")
    members = []
    for m in described.members:
        assigned = sorted(
            (t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions
        )
        members.append(
            Member(
                m.member_id,
                None,
                m.client_id,
                m.client_host,
                assigned,
                m.member_epoch,
                assigned,
            )
        )
    return Group(
        group,
        described.group_state,
        SHARE,
        described.assignor_name,
        client.coordinator(group),
        sorted(members, key=lambda m: m.member_id),
        SHARE,
        described.group_epoch,
        described.assignment_epoch,
    )


def committed_offsets(
    client: Client, group: str, tps: list[TopicPartition] | None = None
) -> dict[TopicPartition, int]:
    """The group's committed offsets (OffsetFetch), of ``tps`` or of every partition it
    committed; partitions without one are left out."""
    topics = None
    if tps is not None:
        topic = schema(OFFSET_FETCH, 6, "OffsetFetchRequestTopic")
        topics = tuple(
            topic(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic(tps).items()
        )
    answer = client.call_coordinator(group, schema(OFFSET_FETCH, 6)(group_id=group, topics=topics))
    if answer.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(answer.error_code)}")
    offsets = {}
    for t in answer.topics:
        for p in t.partitions:
            if p.error_code.value != 0:
                raise ClientError(f"{t.name}-{p.partition_index}: {error_name(p.error_code)}")
            if p.committed_offset >= 0:
                offsets[(t.name, p.partition_index)] = p.committed_offset
    return offsets


def commit_offsets(
    client: Client,
    group: str,
    offsets: dict[TopicPartition, int],
    generation: int = -1,
    member_id: str = "",
) -> None:
    """OffsetCommit; generation -1 with no member commits for a group without members (an
    offset reset, a consumer not in a group)."""
    partition = schema(OFFSET_COMMIT, 8, "OffsetCommitRequestPartition")
    topic = schema(OFFSET_COMMIT, 8, "OffsetCommitRequestTopic")
    request = schema(OFFSET_COMMIT, 8)(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=tuple(
            topic(
                name=t,
                partitions=tuple(
                    partition(
                        partition_index=p,
                        committed_offset=offsets[(t, p)],
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                    for p in ps
                ),
            )
            for t, ps in by_topic(offsets).items()
        ),
    )
    for t in client.call_coordinator(group, request).topics:
        for p in t.partitions:
            if p.error_code.value != 0:
                raise ClientError(
                    f"commit of {t.name}-{p.partition_index}: {error_name(p.error_code)}"
                )


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int
    member: Member | None
    leader_epoch: int | None = None  # a share-partition's, as DescribeShareGroupOffsets has it

    @property
    def lag(self) -> int | None:
        if self.current_offset is None:
            return None
        return max(0, self.log_end_offset - self.current_offset)


def group_lag(client: Client, group: Group) -> list[PartitionLag]:
    """Each partition the group has a member on or an offset committed for, with its log
    end offset and the lag behind it."""
    committed = committed_offsets(client, group.group)
    tps = set(committed) | {tp for m in group.members for tp in m.partitions}
    if not tps:
        return []
    view = ClusterView(client, {t for t, _ in tps})
    ends = list_offsets(view, dict.fromkeys(tps, LATEST))
    return [
        PartitionLag(t, p, committed.get((t, p)), ends[(t, p)], group.owner((t, p)))
        for t, p in sorted(tps)
    ]


def share_group_lag(client: Client, group: Group) -> list[PartitionLag]:
    """Each share-partition the group has a start offset for or a member on, its start
    offset as ``current_offset`` and the lag behind the high watermark, as
    kafka-share-groups.sh shows it."""
    starts = start_offsets(client, group.group)
    tps = set(starts) | {tp for m in group.members for tp in m.partitions}
    if not tps:
        return []
    view = ClusterView(client, {t for t, _ in tps})
    ends = list_offsets(view, dict.fromkeys(tps, LATEST))
    none = StartOffset(None, 0)
    return [
        PartitionLag(
            t,
            p,
            starts.get((t, p), none).offset,
            ends[(t, p)],
            group.owner((t, p)),
            starts.get((t, p), none).leader_epoch,
        )
        for t, p in sorted(tps)
    ]


def _target_partitions(
    client: Client, group: Group, topics: list[str], all_topics: bool
) -> ClusterView:
    if all_topics == bool(topics):
        raise ClientError("--reset-offsets needs --topic or --all-topics (one of them)")
    if all_topics:
        if group.group_type == SHARE:
            offsets: Any = start_offsets(client, group.group)
        else:
            offsets = committed_offsets(client, group.group)
        return ClusterView(client, {t for t, _ in offsets})
    return ClusterView(client, {spec.partition(":")[0] for spec in topics})


def _selected(view: ClusterView, specs: list[str]) -> list[TopicPartition]:
    if not specs:
        return view.all_partitions()
    selected = []
    for spec in specs:
        topic, _, partitions = spec.partition(":")
        if partitions:
            selected += [(topic, int(p)) for p in partitions.split(",") if p.strip()]
        else:
            selected += [(topic, p) for p in view.partitions(topic)]
    return sorted(set(selected))


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of Kafka's ``--to-datetime`` text; local time unless
    it names a zone."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as e:
        raise ClientError(f"--to-datetime must look like 2024-01-31T12:00:00.000: {e}") from e
    return int(moment.astimezone().timestamp() * 1000)


# java.time.Duration.parse's text: [+-]P[nD][T[nH][nM][n[.f]S]], each number signed.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """Milliseconds of kafka-consumer-groups.sh's ``--by-duration`` (an ISO-8601 duration
    as Java's ``Duration.parse`` reads it: ``P1DT2H``, ``PT30M``, ``PT0.5S``, ``-PT1H``)."""
    match = _DURATION.fullmatch(text)
    if match is None or match[3] == "T" or not any(match[i] for i in (2, 4, 5, 6)):
        raise ClientError(f"--by-duration must look like PnDTnHnMnS (e.g. PT1H30M), got {text!r}")
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    minutes_total = (int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)
    millis = minutes_total * 60_000 + int(Decimal(f"{seconds or 0}.{fraction or 0}") * 1000)
    return -millis if sign == "-" else millis


def plan_reset(client: Client, group: Group, args: Any) -> dict[TopicPartition, int]:
    """The new offset of each selected partition: within its log's offsets, except that
    --to-current keeps the committed one as it is, as Kafka's tool does. A share group
    takes --to-earliest, --to-latest, --to-offset and --to-datetime (its start offsets
    are not committed offsets: nothing to shift or keep)."""
    if group.state not in INACTIVE:
        raise ClientError(
            f"Assignments can only be reset if the group '{group.group}' is inactive, but "
            f"the current state is {group.state}."
        )
    if group.group_type == SHARE and (
        args.to_current or args.shift_by is not None or args.by_duration is not None
    ):
        raise ClientError(
            "a share group's offsets are reset with --to-earliest, --to-latest, "
            "--to-offset or --to-datetime"
        )
    view = _target_partitions(client, group, args.topic, args.all_topics)
    tps = _selected(view, args.topic)
    earliest = list_offsets(view, dict.fromkeys(tps, EARLIEST))
    latest = list_offsets(view, dict.fromkeys(tps, LATEST))
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_offset is not None:
        wanted = dict.fromkeys(tps, args.to_offset)
    elif args.to_current:
        # Where nothing is committed: the log end, as Kafka resets.
        return {**latest, **committed_offsets(client, group.group, tps)}
    elif args.to_datetime is not None or args.by_duration is not None:
        if args.to_datetime is not None:
            moment = parse_datetime(args.to_datetime)
        else:
            moment = int(time.time() * 1000) - parse_duration(args.by_duration)
        found = list_offsets(view, dict.fromkeys(tps, moment))
        # No record that late: the log end, as Kafka resets.
        wanted = {tp: latest[tp] if o == NO_OFFSET else o for tp, o in found.items()}
    elif args.shift_by is not None:
        committed = committed_offsets(client, group.group, tps)
        missing = [f"{t}-{p}" for t, p in tps if (t, p) not in committed]
        if missing:
            raise ClientError(f"no committed offset to shift for {', '.join(missing)}")
        wanted = {tp: committed[tp] + args.shift_by for tp in tps}
    else:
        raise ClientError(
            "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, "
            "--to-offset, --to-datetime, --by-duration, --shift-by"
        )
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in tps}


def delete_groups(client: Client, groups: list[str]) -> dict[str, str | None]:
    """DeleteGroups through each group's coordinator: the error name per group (None:
    deleted)."""
    outcome: dict[str, str | None] = {}
    for group in groups:
        request = schema(DELETE_GROUPS, 2)(groups_names=(group,))
        (result,) = client.call_coordinator(group, request).results
        code = result.error_code
        outcome[group] = None if code.value == 0 else error_name(code)
    return outcome


def run(args: argparse.Namespace) -> int:
    """The action the parsed ``gregor groups`` arguments name; 1 on an error."""
    try:
        with Client(args.bootstrap_server, "gregor-groups", config=args.command_config) as client:
            if args.list:
                return _list(client, args)
            groups = _named_groups(client, args)
            if args.describe:
                return _describe(client, groups, args)
            if args.delete:
                return _delete(client, groups, args)
            if args.delete_offsets:
                return _delete_offsets(client, groups, args)
            return _reset(client, groups, args)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


def _named_groups(client: Client, args: Any) -> list[str]:
    if args.all_groups == bool(args.group):
        raise ClientError("name the groups with --group or --all-groups (one of them)")
    return [g.group for g in list_groups(client)] if args.all_groups else args.group


def _filter(text: str | None) -> tuple[str, ...]:
    """The values of --state/--type's comma-separated text (none: no filter)."""
    return tuple(v.strip() for v in (text or "").split(",") if v.strip())


def _list(client: Client, args: Any) -> int:
    """As kafka-consumer-groups.sh --list: --state and --type (each with an optional
    comma-separated filter) add their columns."""
    types = None if args.type is None else tuple(t.lower() for t in _filter(args.type))
    unknown = sorted(set(types or ()) - set(GROUP_TYPES))
    if unknown:
        raise ClientError(
            f"Invalid types list '{args.type}'. Valid types are: " + ", ".join(GROUP_TYPES.values())
        )
    groups = list_groups(client, _filter(args.state), types)
    if args.json:
        print_json(
            {
                "groups": [
                    {"group": g.group, "state": g.state, "protocolType": g.protocol_type}
                    | ({} if types is None else {"type": g.group_type})
                    for g in groups
                ]
            }
        )
    elif args.state is not None or types is not None:
        columns = ["GROUP"]
        if types is not None:
            columns.append("TYPE")
        if args.state is not None:
            columns.append("STATE")
        rows = [
            [g.group]
            + ([GROUP_TYPES.get(g.group_type or "", "Unknown")] if types is not None else [])
            + ([g.state] if args.state is not None else [])
            for g in groups
        ]
        print_table(columns, rows)
    else:
        for g in groups:
            print(g.group)
    return 0


def _member_json(m: Member | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "memberId": m.member_id,
        "instanceId": m.instance_id,
        "clientId": m.client_id,
        "host": m.host,
        "partitions": [{"topic": t, "partition": p} for t, p in m.partitions],
        "memberEpoch": m.member_epoch,
        "targetAssignment": [{"topic": t, "partition": p} for t, p in m.target],
    }


def _assignment(partitions: list[TopicPartition]) -> str | None:
    """Kafka's tool's text of an assignment: ``topic:0,1;other:2`` (None: nothing)."""
    return (
        ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic(partitions).items()) or None
    )


def _describe(client: Client, names: list[str], args: Any) -> int:
    status = 0
    described = []
    for name in names:
        group = describe_group(client, name)
        if group.state == "Dead":
            print(f"Error: Consumer group '{name}' does not exist.", file=sys.stderr)
            status = 1
            continue
        lag_of = share_group_lag if group.group_type == SHARE else group_lag
        lags = lag_of(client, group)
        described.append((group, lags))
    if args.json:
        print_json({"groups": [_group_json(g, lags) for g, lags in described]})
        return status
    for group, lags in described:
        print()
        if args.state is not None:
            coordinator = f"{group.coordinator.address} ({group.coordinator.node_id})"
            columns = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
            row: list[Any] = [group.group, coordinator, group.protocol or None, group.state]
            if args.verbose:
                columns += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
                row += [group.group_epoch, group.assignment_epoch]
            print_table([*columns, "#MEMBERS"], [[*row, len(group.members)]])
            continue
        kind = "Share" if group.group_type == SHARE else "Consumer"
        if not group.members:
            print(f"{kind} group '{group.group}' has no active members.\n")
        elif group.state != "Stable":
            print(f"Warning: Consumer group '{group.group}' is rebalancing.\n")
        if args.members:
            _print_members(group, args.verbose)
            continue
        if group.group_type == SHARE:
            print_table(
                ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
                [
                    (group.group, x.topic, x.partition, x.leader_epoch, x.current_offset, x.lag)
                    for x in lags
                ],
            )
            continue
        rows = [
            (
                group.group,
                lag.topic,
                lag.partition,
                lag.current_offset,
                lag.log_end_offset,
                lag.lag,
                lag.member.member_id if lag.member else None,
                lag.member.host if lag.member else None,
                lag.member.client_id if lag.member else None,
            )
            for lag in lags
        ]
        print_table(
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ],
            rows,
        )
    return status


def _print_members(group: Group, verbose: bool) -> None:
    """As Kafka's tool: GROUP-INSTANCE-ID when a member has one; with --verbose each
    member's epoch and assignment, and its target (at the group's assignment epoch)."""
    static = any(m.instance_id for m in group.members)
    columns = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if static else [])]
    columns += ["HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        columns += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    rows = []
    for m in group.members:
        row: list[Any] = [group.group, m.member_id, *([m.instance_id] if static else [])]
        row += [m.host, m.client_id, len(m.partitions)]
        if verbose:
            row += [m.member_epoch, _assignment(m.partitions), group.assignment_epoch]
            row.append(_assignment(m.target))
        rows.append(row)
    print_table(columns, rows)


def _group_json(group: Group, lags: list[PartitionLag]) -> dict[str, Any]:
    return {
        "group": group.group,
        "type": group.group_type,
        "state": group.state,
        "protocolType": group.protocol_type,
        "assignmentStrategy": group.protocol,
        "groupEpoch": group.group_epoch,
        "targetAssignmentEpoch": group.assignment_epoch,
        "coordinator": {"id": group.coordinator.node_id, "address": group.coordinator.address},
        "members": [_member_json(m) for m in group.members],
        "offsets": [
            {
                "topic": lag.topic,
                "partition": lag.partition,
                "logEndOffset": lag.log_end_offset,
                "lag": lag.lag,
                "memberId": lag.member.member_id if lag.member else None,
            }
            | (
                {"startOffset": lag.current_offset, "leaderEpoch": lag.leader_epoch}
                if group.group_type == SHARE
                else {"currentOffset": lag.current_offset}
            )
            for lag in lags
        ],
    }


def _delete(client: Client, names: list[str], args: Any) -> int:
    outcome = delete_groups(client, names)
    failed = {g: e for g, e in outcome.items() if e is not None}
    if args.json:
        print_json({"groups": [{"group": g, "error": e} for g, e in outcome.items()]})
    elif not failed:
        print(f"Deletion of requested consumer groups ({_quoted(names)}) was successful.")
    if failed and not args.json:
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for g, e in failed.items():
            print(f"* Group '{g}' could not be deleted due to: {e}", file=sys.stderr)
    return 1 if failed else 0


def _delete_offsets(client: Client, names: list[str], args: Any) -> int:
    """As kafka-share-groups.sh --delete-offsets: a share group's state for --topic(s)."""
    if len(names) != 1 or not args.topic:
        raise ClientError("--delete-offsets needs one --group and its --topic(s)")
    (name,) = names
    topics = list(dict.fromkeys(spec.partition(":")[0] for spec in args.topic))
    outcome = delete_start_offsets(client, name, topics)
    failed = {t: e for t, e in outcome.items() if e is not None}
    if args.json:
        topics_json = [{"topic": t, "error": e} for t, e in outcome.items()]
        print_json({"group": name, "topics": topics_json})
    else:
        rows = [(t, f"Error: {e}" if e else "Successful") for t, e in outcome.items()]
        print_table(["TOPIC", "STATUS"], rows)
    return 1 if failed else 0


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _reset(client: Client, names: list[str], args: Any) -> int:
    plans = []
    for name in names:
        group = describe_group(client, name)
        plans.append((group, plan_reset(client, group, args)))
    if args.execute:
        for group, offsets in plans:
            if group.group_type == SHARE:
                alter_start_offsets(client, group.group, offsets)
            else:
                commit_offsets(client, group.group, offsets)
    elif not args.dry_run:
        print(
            "WARN: No action was performed as the --execute option is missing; this was a "
            "dry run (add --dry-run to say so).",
            file=sys.stderr,
        )
    if args.json:
        print_json(
            {
                "executed": args.execute,
                "groups": [
                    {
                        "group": group.group,
                        "offsets": [
                            {"topic": t, "partition": p, "newOffset": o}
                            for (t, p), o in offsets.items()
                        ],
                    }
                    for group, offsets in plans
                ],
            }
        )
        return 0
    rows = [(g.group, t, p, o) for g, offsets in plans for (t, p), o in offsets.items()]
    print()
    print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows)
    return 0
