"""The metadata cache applying the controller's UpdateMetadata (controller/metadata/cache.py)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace as Entity

from gregor.controller.metadata.cache import (
    LEADER_DURING_DELETE,
    MetadataCache,
    apply_update_metadata,
)

TOPIC_ID = uuid.uuid4()


def broker(node_id: int, rack: str | None = None) -> Entity:
    return Entity(
        id=node_id,
        endpoints=(
            Entity(
                port=9000 + node_id, host=f"h{node_id}", listener="PLAINTEXT", security_protocol=0
            ),
            Entity(
                port=9100 + node_id, host=f"r{node_id}", listener="replication", security_protocol=0
            ),
        ),
        rack=rack,
    )


def partition(
    index: int,
    leader: int,
    epoch: int = 0,
    isr: tuple[int, ...] = (1, 2, 3),
    offline: tuple[int, ...] = (),
) -> Entity:
    return Entity(
        partition_index=index,
        controller_epoch=1,
        leader=leader,
        leader_epoch=epoch,
        isr=isr,
        zk_version=epoch,
        replicas=(1, 2, 3),
        offline_replicas=offline,
    )


def update(brokers: list[Entity], topics: list[Entity], controller: int = 1) -> Entity:
    return Entity(
        controller_id=controller,
        controller_epoch=1,
        broker_epoch=-1,
        topic_states=tuple(topics),
        live_brokers=tuple(brokers),
    )


def topic(name: str, partitions: list[Entity], topic_id: uuid.UUID = TOPIC_ID) -> Entity:
    return Entity(topic_name=name, topic_id=topic_id, partition_states=tuple(partitions))


def test_brokers_with_endpoints_racks_and_the_controller_replace_the_old() -> None:
    cache = MetadataCache("c", -1)
    apply_update_metadata(cache, update([broker(1, "a"), broker(2, "b"), broker(3)], [], 2))
    assert sorted(cache.brokers) == [1, 2, 3]
    assert cache.controller_id == 2
    assert cache.brokers[1].rack == "a" and cache.brokers[3].rack is None
    assert cache.brokers[2].endpoint("PLAINTEXT") == ("h2", 9002)
    assert cache.brokers[2].endpoint("REPLICATION") == ("r2", 9102)
    apply_update_metadata(cache, update([broker(1), broker(3)], [], 3))
    assert sorted(cache.brokers) == [1, 3] and cache.controller_id == 3


def test_partition_states_are_added_updated_and_kept_when_not_named() -> None:
    cache = MetadataCache("c", -1)
    brokers = [broker(1), broker(2), broker(3)]
    apply_update_metadata(cache, update(brokers, [topic("t", [partition(0, 1), partition(1, 2)])]))
    assert cache.topic_name(TOPIC_ID) == "t"
    p0 = cache.partition("t", 0)
    assert p0 is not None and (p0.leader, p0.replicas, p0.isr) == (1, [1, 2, 3], [1, 2, 3])
    # Broker 1 dies: the controller sends only the partition that changed.
    apply_update_metadata(
        cache,
        update(brokers[1:], [topic("t", [partition(0, 2, epoch=1, isr=(2, 3), offline=(1,))])]),
    )
    p0, p1 = cache.partition("t", 0), cache.partition("t", 1)
    assert p0 is not None and (p0.leader, p0.leader_epoch, p0.isr) == (2, 1, [2, 3])
    assert p0.offline_replicas == [1]
    assert p1 is not None and p1.leader == 2  # untouched
    # A leader that is not a live broker has no live leader.
    apply_update_metadata(cache, update(brokers[2:], []))
    assert cache.live_leader(p0) is None
    assert cache.partition("t", 1) is not None  # broker-only updates keep partitions


def test_partitions_led_during_delete_leave_the_cache_with_their_topic() -> None:
    cache = MetadataCache("c", -1)
    brokers = [broker(1)]
    apply_update_metadata(
        cache, update(brokers, [topic("gone", [partition(0, 1), partition(1, 1)])])
    )
    deleted = apply_update_metadata(
        cache, update(brokers, [topic("gone", [partition(0, LEADER_DURING_DELETE)])])
    )
    assert deleted == {("gone", 0)}
    assert cache.partition("gone", 0) is None and cache.partition("gone", 1) is not None
    deleted = apply_update_metadata(
        cache, update(brokers, [topic("gone", [partition(1, LEADER_DURING_DELETE)])])
    )
    assert deleted == {("gone", 1)}
    assert "gone" not in cache.topics and cache.topic_name(TOPIC_ID) is None
    assert cache.colliding_topic("gone") is None


def test_a_topic_recreated_under_its_name_replaces_the_old_one() -> None:
    cache = MetadataCache("c", -1)
    brokers = [broker(1)]
    apply_update_metadata(cache, update(brokers, [topic("t", [partition(0, 1), partition(1, 1)])]))
    new_id = uuid.uuid4()
    deleted = apply_update_metadata(cache, update(brokers, [topic("t", [partition(0, 1)], new_id)]))
    assert deleted == {("t", 0), ("t", 1)}
    assert cache.topics["t"].topic_id == new_id and list(cache.topics["t"].partitions) == [0]
    assert cache.topic_name(TOPIC_ID) is None


def test_internal_topics_are_marked_internal() -> None:
    cache = MetadataCache("c", -1)
    apply_update_metadata(
        cache, update([broker(1)], [topic("__consumer_offsets", [partition(0, 1)])])
    )
    assert cache.topics["__consumer_offsets"].internal
