"""Topic creation is all or nothing, also across kill -9, and each start of the broker is a
new leader election (the leader epoch grows), against a real broker process."""

from __future__ import annotations

import datetime
import os
import random
import resource
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.wire import versions as v
from gregor.wire.records import build_batch, split_batches
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, fetch_one
from tests.test_internal_topics import assert_prompt, create_one, metadata

TIMEOUT = datetime.timedelta(seconds=5)


def produce(client: WireClient, topic: str, n: int) -> Any:
    cls = request_type(v.PRODUCE, 9)
    module = __import__(cls.__module__, fromlist=["x"])
    batch = build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(n)])
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=TIMEOUT,
        topic_data=(
            module.TopicProduceData(
                name=topic, partition_data=(module.PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    return client.call(v.PRODUCE, 9, request).responses[0].partition_responses[0]


def fetch(client: WireClient, topic: str, current_leader_epoch: int) -> Any:
    return fetch_one(client, topic, 0, 0, current_leader_epoch)


def list_offsets(client: WireClient, topic: str, current_leader_epoch: int) -> Any:
    cls = request_type(v.LIST_OFFSETS, 8)
    module = __import__(cls.__module__, fromlist=["x"])
    partition = module.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=current_leader_epoch, timestamp=-1
    )
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=(module.ListOffsetsTopic(name=topic, partitions=(partition,)),),
    )
    return client.call(v.LIST_OFFSETS, 8, request).topics[0].partitions[0]


def leader_epoch(client: WireClient, topic: str) -> int:
    return metadata(client, topic, auto_create=False).partitions[0].leader_epoch


def test_leader_epoch_grows_with_every_start(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port)
        assert create_one(client, "epochs").error_code == ErrorCode.none
        assert leader_epoch(client, "epochs") == 0
        assert produce(client, "epochs", 2).error_code == ErrorCode.none
        client.close()

        broker.restart()  # clean
        broker.kill()  # and a crash
        broker.start()
        client = WireClient(broker.port)
        assert leader_epoch(client, "epochs") == 2
        assert produce(client, "epochs", 1).error_code == ErrorCode.none
        # The epoch checks of Fetch and ListOffsets see the new epoch: a client that cached an
        # older one is fenced, one that claims a newer one is ahead of this leader.
        assert fetch(client, "epochs", 0).error_code == ErrorCode.fenced_leader_epoch
        assert fetch(client, "epochs", 3).error_code == ErrorCode.unknown_leader_epoch
        current = fetch(client, "epochs", 2)
        assert current.error_code == ErrorCode.none
        # Batches carry the epoch they were written at.
        assert [h.partition_leader_epoch for h in split_batches(current.records)] == [0, 2]
        assert list_offsets(client, "epochs", 1).error_code == ErrorCode.fenced_leader_epoch
        latest = list_offsets(client, "epochs", 2)
        assert (latest.error_code, latest.offset, latest.leader_epoch) == (ErrorCode.none, 3, 2)
        client.close()


def test_create_whose_logs_cannot_be_made_leaves_nothing(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        # Leave the broker a few descriptors more than it holds: far fewer than 200 partitions'
        # logs need, enough for the small topic and the connections below.
        open_fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
        _, hard = resource.prlimit(broker.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (open_fds + 40, hard))
        client = WireClient(broker.port)
        refused = create_one(client, "too-big", 200)
        assert refused.error_code == ErrorCode.kafka_storage_error
        assert "too-big" in refused.error_message
        assert metadata(client, "too-big", auto_create=False).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        assert not list(broker.data_dir.glob("too-big-*"))
        assert_prompt(broker.port)  # its descriptors were given back at once
        assert create_one(client, "small", 2).error_code == ErrorCode.none
        client.close()

        broker.restart()
        client = WireClient(broker.port)
        assert metadata(client, "too-big", auto_create=False).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        assert len(metadata(client, "small", auto_create=False).partitions) == 2
        client.close()
    assert "Traceback" not in broker.log_path.read_text()


PARTITIONS = 8


def create_until_killed(port: int, prefix: str, stop: threading.Event, acked: set[str]) -> None:
    client = WireClient(port)
    try:
        for i in range(10_000):
            if stop.is_set():
                return
            name = f"{prefix}-t{i}"
            if create_one(client, name, PARTITIONS).error_code == ErrorCode.none:
                acked.add(name)
    except OSError:  # the broker died under the request
        return
    finally:
        client.close()


def test_kill_9_during_creation_leaves_whole_topics_or_none(tmp_path: Path) -> None:
    rng = random.Random(7)
    acked: set[str] = set()
    with BrokerProcess(tmp_path) as broker:
        for round_ in range(3):
            stop = threading.Event()

            creator = threading.Thread(
                target=create_until_killed, args=(broker.port, f"r{round_}", stop, acked)
            )
            creator.start()
            deadline = time.monotonic() + 30
            while not any(n.startswith(f"r{round_}-") for n in acked):
                assert time.monotonic() < deadline, "no topic created"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))
            broker.kill()
            stop.set()
            creator.join()
            broker.start()

            client = WireClient(broker.port)
            described = {}
            for log_dir in broker.data_dir.iterdir():
                name, _, index = log_dir.name.rpartition("-")
                if log_dir.is_dir() and name.startswith("r") and index.isdigit():
                    described.setdefault(name, metadata(client, name, auto_create=False))
            for name in acked:
                topic = metadata(client, name, auto_create=False)
                assert topic.error_code == ErrorCode.none, name
                assert len(topic.partitions) == PARTITIONS, name
            # Every partition directory belongs to a whole topic of the metadata; a topic
            # the metadata names has every one of its directories.
            for name, topic in described.items():
                assert topic.error_code == ErrorCode.none, f"{name}: logs without a topic"
                for index in range(PARTITIONS):
                    assert (broker.data_dir / f"{name}-{index}").is_dir(), (name, index)
            client.close()
    assert "Traceback" not in broker.log_path.read_text()


def test_start_up_sets_aside_logs_the_metadata_does_not_know(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port)
        for name in ("kept", "emptied"):
            assert create_one(client, name).error_code == ErrorCode.none
            assert produce(client, name, 3).error_code == ErrorCode.none
        client.close()
        broker.stop()
        # Logs of a topic whose creation a crash cut before the commit (or whose deletion
        # it cut after): the metadata does not name them.
        shutil.copytree(broker.data_dir / "kept-0", broker.data_dir / "ghost-0")
        # A topic whose logs went missing.
        shutil.rmtree(broker.data_dir / "emptied-0")
        broker.start()

        client = WireClient(broker.port)
        assert metadata(client, "ghost", auto_create=False).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        assert not (broker.data_dir / "ghost-0").exists()
        (stray,) = broker.data_dir.glob("ghost-0.*-stray")
        assert sorted(p.name for p in stray.glob("*.log")) == ["00000000000000000000.log"]
        assert (stray / "00000000000000000000.log").stat().st_size > 0  # kept, not deleted
        # The name is free again, for a topic of its own.
        assert create_one(client, "ghost").error_code == ErrorCode.none
        assert list_offsets(client, "ghost", -1).offset == 0
        assert list_offsets(client, "kept", -1).offset == 3
        # The topic whose logs are gone serves again, from empty.
        assert list_offsets(client, "emptied", -1).offset == 0
        assert produce(client, "emptied", 1).error_code == ErrorCode.none
        client.close()
    log = broker.log_path.read_text()
    assert "Log of ghost-0 is not in the metadata" in log
    assert "The logs of emptied partition(s) [0] are missing" in log
