"""The well-behaved share group client of the checks after the fuzz: a fresh share group's
member must still get every record of the canary's partition exactly once through
ShareFetch, and the fuzzed share groups must still be describable."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from gregor.apis.context import build, nested
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    INCREMENTAL_ALTER_CONFIGS,
    SHARE_FETCH,
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
)
from tests.kafka_wire import WireClient

GROUP_RESOURCE = 32  # ConfigResource type GROUP
LOADING = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
GROUP_ID_NOT_FOUND = 69
ACCEPT = 1
MAX_RECORDS = 500


def set_group_configs(client: WireClient, group: str, configs: dict[str, str]) -> int:
    """IncrementalAlterConfigs (SET) of a group's configs; returns Kafka's error code."""
    cls = request_type(INCREMENTAL_ALTER_CONFIGS, 1)
    config = nested(cls, "AlterableConfig")
    resource = nested(cls, "AlterConfigsResource")(
        resource_type=GROUP_RESOURCE,
        resource_name=group,
        configs=tuple(config(name=k, config_operation=0, value=v) for k, v in configs.items()),
    )
    request = cls(validate_only=False, resources=(resource,))
    return int(client.call(INCREMENTAL_ALTER_CONFIGS, 1, request).responses[0].error_code)


def share_heartbeat(
    client: WireClient, group: str, member_id: str, epoch: int, topic: str | None = None
) -> Any:
    request = build(
        request_type(SHARE_GROUP_HEARTBEAT, 1),
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=None if topic is None else (topic,),
    )
    return client.call(SHARE_GROUP_HEARTBEAT, 1, request)


def share_fetch(
    client: WireClient,
    group: str,
    member_id: str,
    session_epoch: int,
    topic_id: uuid.UUID,
    accepted: list[tuple[int, int]],
) -> Any:
    """ShareFetch v1 of partition 0, accepting the ``accepted`` (first, last) ranges."""
    cls = request_type(SHARE_FETCH, 1)
    batch = nested(cls, "AcknowledgementBatch")
    partition = nested(cls, "FetchPartition")(
        partition_index=0,
        acknowledgement_batches=tuple(
            batch(first_offset=a, last_offset=b, acknowledge_types=(ACCEPT,)) for a, b in accepted
        ),
    )
    request = cls(
        group_id=group,
        member_id=member_id,
        share_session_epoch=session_epoch,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=MAX_RECORDS,
        batch_size=MAX_RECORDS,
        topics=(nested(cls, "FetchTopic")(topic_id=topic_id, partitions=(partition,)),),
        forgotten_topics_data=(),
    )
    return client.call(SHARE_FETCH, 1, request)


def share_member_problems(
    client: WireClient, topic: str, topic_id: uuid.UUID, offsets: list[int], deadline_s: float = 60
) -> list[str]:
    """A member of a fresh share group (reading from the earliest offset) joins, is assigned
    ``topic``'s partition, and must acquire each of ``offsets`` exactly once, accepting what
    it gets; then it closes its share session and leaves."""
    group, member_id = f"canary-share-{uuid.uuid4()}", str(uuid.uuid4())
    error = set_group_configs(client, group, {"share.auto.offset.reset": "earliest"})
    if error:
        return [f"setting a share group's configs got error code {error}"]
    give_up = time.monotonic() + deadline_s
    epoch, assigned = 0, False
    while not assigned and time.monotonic() < give_up:
        joined = share_heartbeat(client, group, member_id, epoch, topic if epoch == 0 else None)
        if joined.error_code and joined.error_code not in LOADING:
            return [f"a share member joining a fresh group got error code {joined.error_code}"]
        epoch = joined.member_epoch if not joined.error_code else epoch
        owned = joined.assignment.topic_partitions if joined.assignment else ()
        assigned = [(t.topic_id, tuple(t.partitions)) for t in owned] == [(topic_id, (0,))]
        if not assigned:
            time.sleep(0.1)
    if not assigned:
        return [f"a share member of a fresh group was not assigned {topic} within {deadline_s} s"]
    acquired: list[int] = []
    accepted: list[tuple[int, int]] = []
    session_epoch = 0
    problems = []
    while len(acquired) < len(offsets) and time.monotonic() < give_up:
        response = share_fetch(client, group, member_id, session_epoch, topic_id, accepted)
        if response.error_code:
            return [f"a fresh share member's ShareFetch got error code {response.error_code}"]
        session_epoch += 1
        accepted = []
        for answer in (p for t in response.responses for p in t.partitions):
            if answer.error_code or answer.acknowledge_error_code:
                problems.append(
                    f"a fresh share member's ShareFetch got error code {answer.error_code}"
                    f" (acknowledgement {answer.acknowledge_error_code})"
                )
            for a in answer.acquired_records:
                acquired += range(a.first_offset, a.last_offset + 1)
                accepted.append((a.first_offset, a.last_offset))
        if problems:
            return problems
    closed = share_fetch(client, group, member_id, -1, topic_id, accepted).error_code
    left = share_heartbeat(client, group, member_id, -1).error_code
    if sorted(acquired) != offsets:
        missing = len(set(offsets) - set(acquired))
        twice = len(acquired) - len(set(acquired))
        problems.append(
            f"a fresh share member acquired {len(acquired)} of {len(offsets)} records"
            f" ({missing} missing, {twice} twice)"
        )
    if closed or left:
        problems.append(f"closing the share session got {closed}, leaving {left}")
    return problems


def share_group_problems(
    client: WireClient, groups: tuple[str, ...], deadline_s: float = 30
) -> list[str]:
    """ShareGroupDescribe of ``groups`` must answer each (or GROUP_ID_NOT_FOUND), retried
    while the coordinator loads."""
    request = build(
        request_type(SHARE_GROUP_DESCRIBE, 1), group_ids=groups, include_authorized_operations=True
    )
    give_up = time.monotonic() + deadline_s
    while True:
        described = client.call(SHARE_GROUP_DESCRIBE, 1, request).groups
        errors = {g.error_code for g in described} - {0, GROUP_ID_NOT_FOUND}
        if not errors and len(described) == len(groups):
            return []
        if not errors <= LOADING or time.monotonic() > give_up:
            return [f"ShareGroupDescribe of the fuzzed groups answered {sorted(errors)}"]
        time.sleep(0.1)
