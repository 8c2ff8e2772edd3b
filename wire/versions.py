"""The API versions this broker serves: api key -> (min, max).

Bounded by what our handlers implement, not by what kio can parse. The client APIs match
one Kafka release, 4.1: every API Gregor serves at exactly 4.1's range (so a client that
infers the broker's release from the ranges, as kafka-python does, gets one coherent
answer), plus the ZooKeeper-era inter-broker APIs of cluster mode. APIs Gregor does not
serve at all (delegation tokens, features, KRaft, telemetry) are left out of ApiVersions,
as tests/test_api_versions_release.py lists.
"""

from __future__ import annotations

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
ALTER_PARTITION = 56
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
LIST_CONFIG_RESOURCES = 74
DESCRIBE_TOPIC_PARTITIONS = 75
SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
READ_SHARE_GROUP_STATE_SUMMARY = 87
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92

SUPPORTED: dict[int, tuple[int, int]] = {
    # Served from v3; ApiVersions advertises v0 (ADVERTISED_MIN), as Kafka 4 does.
    PRODUCE: (3, 13),
    FETCH: (4, 18),
    LIST_OFFSETS: (1, 10),
    METADATA: (0, 13),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    # Transactions: EndTxn v5 and TxnOffsetCommit v5 have transaction version 2's semantics
    # (KIP-890 part 2), chosen per request as by Kafka.
    INIT_PRODUCER_ID: (0, 5),
    ADD_PARTITIONS_TO_TXN: (0, 5),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 5),
    TXN_OFFSET_COMMIT: (0, 5),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 2),
    # v0-v1 lack a schema in kio; clients since Kafka 2.1 send v2 or later.
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_CLUSTER: (0, 2),
    LIST_CONFIG_RESOURCES: (0, 1),
    # Cluster administration (Kafka 4's ranges; DescribeLogDirs v0 is gone from Kafka 4).
    CREATE_PARTITIONS: (0, 3),
    DESCRIBE_LOG_DIRS: (1, 4),
    ELECT_LEADERS: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DELETE_RECORDS: (0, 2),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    # Groups: OffsetCommit/OffsetFetch stop at v9 as in Kafka 4.1, which has v10 (topics by
    # id) only behind unstable.api.versions.enable (KAFKA-19186 made it stable in 4.2).
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    SYNC_GROUP: (0, 5),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    # The consumer group protocol (KIP-848).
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
    # Share groups (KIP-932) at Kafka 4.1's versions; answered UNSUPPORTED_VERSION unless
    # group.share.enable. Membership:
    SHARE_GROUP_HEARTBEAT: (1, 1),
    SHARE_GROUP_DESCRIBE: (1, 1),
    # ShareFetch and ShareAcknowledge:
    SHARE_FETCH: (1, 1),
    SHARE_ACKNOWLEDGE: (1, 1),
    # The admin APIs of share groups' offsets:
    DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0),
    ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    # The share coordinator's state, sent by share-partition leaders and group coordinators:
    INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    READ_SHARE_GROUP_STATE: (0, 0),
    WRITE_SHARE_GROUP_STATE: (0, 0),
    DELETE_SHARE_GROUP_STATE: (0, 0),
    READ_SHARE_GROUP_STATE_SUMMARY: (0, 0),
    # SASL (server/security/authenticator.py; apis/sasl.py where no exchange is due).
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # ACLs (Kafka 4 removed v0 of each).
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    # Inter-broker, ZooKeeper mode (wire/interbroker.py): only Gregor brokers send them,
    # at one version each; AlterPartition v2 names topics by id, as the controller needs.
    LEADER_AND_ISR: (7, 7),
    STOP_REPLICA: (4, 4),
    UPDATE_METADATA: (8, 8),
    CONTROLLED_SHUTDOWN: (3, 3),
    ALTER_PARTITION: (2, 2),
    # From the transaction coordinators (v1, flexible: what Kafka 3.x and 4 brokers send).
    WRITE_TXN_MARKERS: (1, 1),
}


# Minimum versions ApiVersions advertises below the served ones. Kafka 4 removed Produce
# v0-v2 but still advertises v0 (ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION,
# KAFKA-18659): librdkafka turns compression off unless Produce v0 is in the range. Clients
# pick the highest common version, so none sends v0-v2 to a broker advertising v13; one
# that does has its connection closed, as by Kafka (apis/dispatch.py).
ADVERTISED_MIN: dict[int, int] = {PRODUCE: 0}


def advertised() -> dict[int, tuple[int, int]]:
    """What ApiVersions answers: the served ranges, with the advertised minimums."""
    return {k: (ADVERTISED_MIN.get(k, lo), hi) for k, (lo, hi) in SUPPORTED.items()}


def is_supported(api_key: int, version: int) -> bool:
    span = SUPPORTED.get(api_key)
    return span is not None and span[0] <= version <= span[1]
