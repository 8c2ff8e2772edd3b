"""Dynamic broker configs (KIP-226) against a real broker, checked against Kafka 4.1's
DynamicBrokerConfig rules: every key Kafka reconfigures is accepted (per broker, and for the
cluster default unless Kafka keeps it per broker) and described with its dynamic source;
read-only keys, unprefixed SSL keys, per-broker keys at the cluster level, bad values and
refused reconfigurations are answered with Kafka's error and message; unknown keys are
stored; num.io.threads resizes the handler pool. And DescribeConfigs' synonyms, as Kafka's
ConfigHelper lists them, for every broker key chain of more than one key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import gregor.server.config  # noqa: F401  (registers the server.properties keys)
from compat_tests.broker import BrokerProcess
from gregor.apis.context import nested
from gregor.configdef import Type
from gregor.controller.configs import (
    ALL_DYNAMIC_BROKER_KEYS,
    BROKER_KEYS,
    DELETE,
    PER_BROKER_KEYS,
    SET,
    SSL_RECONFIGURABLE,
)
from gregor.controller.metadata.config_resource import BROKER, TOPIC
from gregor.wire.schema import request_type
from gregor.wire.versions import DESCRIBE_CONFIGS
from tests.kafka_wire import WireClient, create_topic
from tests.test_config_apis import errors, incremental, legacy

# DescribeConfigs sources
TOPIC_SRC, BROKER_SRC, DEFAULT_BROKER_SRC, STATIC, DEFAULT = 1, 2, 3, 4, 5
LONG_MAX = str(2**63 - 1)
OK = (ErrorCode.none, None)
INVALID = "Invalid dynamic configuration"


# Brokers of their own (not process_pool's): the tests alter broker-wide configs.
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("dynamic")) as b:
        yield b


def describe(
    client: WireClient, resource_type: int, name: str, keys: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """name -> the entry (value, source, sensitive, read-only, type, synonyms)."""
    cls = request_type(DESCRIBE_CONFIGS, 4)
    request = cls(
        include_synonyms=True,
        include_documentation=False,
        resources=(
            nested(cls, "DescribeConfigsResource")(
                resource_type=resource_type, resource_name=name, configuration_keys=keys
            ),
        ),
    )
    (result,) = client.call(DESCRIBE_CONFIGS, 4, request).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def shown(entry: Any) -> tuple[str | None, int]:
    return entry.value, entry.config_source


def set_one(client: WireClient, name: str, key: str, value: str | None) -> tuple:
    return errors(incremental(client, [(BROKER, name, [(key, SET, value)])]))[0]


def delete(client: WireClient, name: str, *keys: str) -> None:
    assert errors(incremental(client, [(BROKER, name, [(k, DELETE, None) for k in keys])])) == [OK]


# A value Kafka accepts for each dynamic key (a change from the default where it matters).
_VALUES = {
    "num.io.threads": "9",
    "num.network.threads": "4",
    "num.replica.fetchers": "2",
    "num.recovery.threads.per.data.dir": "3",
    "background.threads": "12",
    "log.cleaner.threads": "2",
    "ssl.client.auth": "required",
    "max.connections.per.ip.overrides": "127.0.0.1:500",
    "log.cleanup.policy": "compact",
    "compression.type": "lz4",
    "log.message.timestamp.type": "LogAppendTime",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SPARE:PLAINTEXT",
    "log.cleaner.min.cleanable.ratio": "0.4",
    "sasl.login.refresh.window.factor": "0.9",
    "log.local.retention.ms": "-2",
    "log.local.retention.bytes": "-2",
}
_BY_TYPE = {
    Type.INT: "1000",
    Type.LONG: "1000",
    Type.SHORT: "100",
    Type.DOUBLE: "0.5",
    Type.BOOLEAN: "true",
    Type.STRING: "x",
    Type.LIST: "a",
    Type.PASSWORD: "secret",
    Type.CLASS: "org.example.Plugin",
}


def _value(key: str) -> str:
    if key in _VALUES:
        return _VALUES[key]
    definition = BROKER_KEYS[key]
    if definition.default not in (None, "") and definition.type not in (Type.PASSWORD, Type.LIST):
        return definition.default
    return _BY_TYPE[definition.type]


@pytest.mark.parametrize("key", sorted(ALL_DYNAMIC_BROKER_KEYS - {"listeners"}))
def test_every_dynamic_key_per_broker_and_cluster_default(client: WireClient, key: str) -> None:
    value = _value(key)
    sensitive = BROKER_KEYS[key].sensitive
    for name, source in (("0", BROKER_SRC), ("", DEFAULT_BROKER_SRC)):
        outcome = set_one(client, name, key, value)
        if key in SSL_RECONFIGURABLE:
            assert outcome == (
                ErrorCode.invalid_request,
                "These security configs can be dynamically updated only per-listener using "
                f"the listener prefix: Set({key})",
            )
            continue
        if name == "" and key in PER_BROKER_KEYS:
            assert outcome == (
                ErrorCode.invalid_request,
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: Set({key})",
            )
            continue
        assert outcome == OK, key
        try:
            entry = describe(client, BROKER, "0", (key,))[key]
            assert (entry.value, entry.config_source) == (None if sensitive else value, source)
            assert (entry.is_sensitive, entry.read_only) == (sensitive, False)
            if name == "":
                default = describe(client, BROKER, "", (key,))[key]
                assert shown(default) == (None if sensitive else value, DEFAULT_BROKER_SRC)
        finally:
            delete(client, name, key)
        assert describe(client, BROKER, "0", (key,))[key].config_source in (STATIC, DEFAULT)


def test_kafka_refusals(client: WireClient) -> None:
    listeners = describe(client, BROKER, "0", ("listeners",))["listeners"].value
    refusals = [
        # read-only keys, the other keys of a chain among them (Kafka: read-only)
        *[
            ("0", {key: "1"}, f"Cannot update these configs dynamically: Set({key})")
            for key in (
                "broker.id",
                "zookeeper.connect",
                "log.dirs",
                "log.retention.hours",
                "log.retention.minutes",
                "log.roll.hours",
                "log.flush.scheduler.interval.ms",
                "num.partitions",
                "advertised.listeners",
                "process.roles",
            )
        ],
        ("", {"broker.id": "1"}, "Cannot update these configs dynamically: Set(broker.id)"),
        (
            "0",
            {"ssl.keystore.password": "x", "ssl.key.password": "y"},
            "These security configs can be dynamically updated only per-listener using the "
            "listener prefix: Set(ssl.key.password, ssl.keystore.password)",
        ),
        (
            "",
            {"listeners": listeners},
            "Cannot update these configs at default cluster level, broker id must be "
            "specified: Set(listeners)",
        ),
        (
            "",
            {"listener.name.plaintext.sasl.jaas.config": "x"},
            "Cannot update these configs at default cluster level, broker id must be "
            "specified: Set(listener.name.plaintext.sasl.jaas.config)",
        ),
        (
            "0",
            {"num.io.threads": "abc"},
            "Invalid value abc for configuration num.io.threads: Not a number of type INT",
        ),
        (
            "0",
            {"num.io.threads": "0"},
            "Invalid value 0 for configuration num.io.threads: Value must be at least 1",
        ),
        (
            "0",
            {"sasl.kerberos.min.time.before.relogin": "soon"},
            "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: "
            "Not a number of type LONG",
        ),
        (
            "0",
            {"ssl.client.auth": "always"},
            "Invalid value always for configuration ssl.client.auth: String must be one of: "
            "required, requested, none",
        ),
        # the reconfigurations' own checks (Kafka logs the reason, answers this)
        ("0", {"num.io.threads": "17"}, INVALID),  # more than double 8
        ("0", {"num.io.threads": "3"}, INVALID),  # less than half 8
        ("", {"num.network.threads": "7"}, INVALID),
        ("0", {"log.cleaner.threads": "3"}, INVALID),
        ("0", {"listeners": "SPARE://127.0.0.1:0"}, INVALID),  # drops the advertised one
        ("0", {"listeners": f"{listeners},NEW://127.0.0.1:0"}, INVALID),  # NEW has no protocol
        (
            "0",
            {"listener.name.plaintext.sasl.kerberos.service.name": "k", "max.connections": "9"},
            INVALID,  # an existing listener's own keys
        ),
        ("0", {"log.local.retention.ms": "-1", "log.retention.ms": "1000"}, INVALID),
        ("0", {"log.local.retention.ms": "2000", "log.retention.ms": "1000"}, INVALID),
    ]
    for name, configs, message in refusals:
        ops = [(k, SET, v) for k, v in configs.items()]
        got = errors(incremental(client, [(BROKER, name, ops)]))
        assert got == [(ErrorCode.invalid_request, message)], (name, configs)
        legacy_got = legacy(client, BROKER, name, configs)
        assert (legacy_got.error_code, legacy_got.error_message) == (
            ErrorCode.invalid_request,
            message,
        ), ("legacy", name, configs)
    assert describe(client, BROKER, "") == {}
    entries = describe(client, BROKER, "0")
    assert all(e.config_source != BROKER_SRC for e in entries.values())


def test_security_listener_and_unknown_keys_are_stored(client: WireClient) -> None:
    listeners = describe(client, BROKER, "0", ("listeners",))["listeners"].value
    # Per-broker SASL keys (dynamic in Kafka per listener and per broker): stored, in
    # force once Gregor has SASL; a new listener's keys, sensitive ones hidden; unknown keys
    # stored as given, of unknown type and so described as sensitive, as Kafka does; a
    # listener added with its protocol.
    configs = {
        "sasl.kerberos.min.time.before.relogin": "120000",
        "listener.name.spare.ssl.keystore.password": "secret",
        "listener.name.spare.sasl.kerberos.service.name": "kafka",
        "cleanup.policy": "compact",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SPARE:PLAINTEXT",
        "listeners": f"{listeners},SPARE://127.0.0.1:0",
    }
    ops = [(k, SET, v) for k, v in configs.items()]
    assert errors(incremental(client, [(BROKER, "0", ops)])) == [OK]
    try:
        entries = describe(client, BROKER, "0")
        relogin = entries["sasl.kerberos.min.time.before.relogin"]
        assert (shown(relogin), relogin.read_only) == (("120000", BROKER_SRC), False)
        assert synonyms(relogin) == [
            ("sasl.kerberos.min.time.before.relogin", "120000", BROKER_SRC),
            ("sasl.kerberos.min.time.before.relogin", "60000", DEFAULT),
        ]
        password = entries["listener.name.spare.ssl.keystore.password"]
        assert (shown(password), password.is_sensitive) == ((None, BROKER_SRC), True)
        assert synonyms(password) == [
            ("listener.name.spare.ssl.keystore.password", None, BROKER_SRC)
        ]
        service = entries["listener.name.spare.sasl.kerberos.service.name"]
        assert (shown(service), service.is_sensitive, service.config_type) == (
            ("kafka", BROKER_SRC),
            False,
            2,  # STRING, its base key's type
        )
        unknown = entries["cleanup.policy"]
        assert (shown(unknown), unknown.is_sensitive, unknown.config_type) == (
            (None, BROKER_SRC),
            True,
            0,  # UNKNOWN
        )
        assert shown(entries["listeners"]) == (f"{listeners},SPARE://127.0.0.1:0", BROKER_SRC)
        # The SPARE listener exists now: its own keys are fixed until a restart.
        change = [("listener.name.spare.sasl.kerberos.service.name", SET, "other")]
        refused = incremental(client, [(BROKER, "0", [*change, ("max.connections", SET, "9")])])
        assert errors(refused) == [(ErrorCode.invalid_request, INVALID)]
    finally:
        delete(client, "0", *configs)
    # Unknown keys at the cluster level too.
    assert set_one(client, "", "some.plugin.setting", "1") == OK
    default = describe(client, BROKER, "")["some.plugin.setting"]
    assert (shown(default), default.is_sensitive) == ((None, DEFAULT_BROKER_SRC), True)
    delete(client, "", "some.plugin.setting")


def test_num_io_threads_resizes_the_handler_pool(broker: BrokerProcess, client: WireClient) -> None:
    def resizes() -> list[str]:
        lines = broker.log_path.read_text(errors="replace").splitlines()
        return [line for line in lines if "Resizing the request handler pool" in line]

    before = len(resizes())
    try:
        assert set_one(client, "0", "num.io.threads", "12") == OK
        assert shown(describe(client, BROKER, "0")["num.io.threads"]) == ("12", BROKER_SRC)
        # The cluster default under the per-broker value: 12 -> 16 (at most double).
        assert set_one(client, "", "num.io.threads", "16") == OK
        assert shown(describe(client, BROKER, "0")["num.io.threads"]) == ("12", BROKER_SRC)
        delete(client, "0", "num.io.threads")
        entry = describe(client, BROKER, "0")["num.io.threads"]
        assert shown(entry) == ("16", DEFAULT_BROKER_SRC)
        assert synonyms(entry) == [
            ("num.io.threads", "16", DEFAULT_BROKER_SRC),
            ("num.io.threads", "8", DEFAULT),
        ]
        # Requests are still handled, by the larger pool.
        assert create_topic(client, "after-resize").error_code == ErrorCode.none
        many = [WireClient(broker.port) for _ in range(20)]
        try:
            for c in many:
                assert describe(c, TOPIC, "after-resize")["retention.ms"].value == "604800000"
        finally:
            for c in many:
                c.close()
    finally:
        delete(client, "", "num.io.threads")
    deadline = time.monotonic() + 10
    while len(resizes()) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [line.split("pool ", 1)[1].split(")")[0] + ")" for line in resizes()[before:]] == [
        "from 8 to 12 (num.io.threads)",
        "from 12 to 16 (num.io.threads)",
        "from 16 to 8 (num.io.threads)",
    ]
    assert shown(describe(client, BROKER, "0")["num.io.threads"]) == ("8", DEFAULT)


# -- synonyms ------------------------------------------------------------------------------

STATIC_OVERRIDES = {
    "log.retention.minutes": "120",
    "log.roll.hours": "24",
    "log.flush.scheduler.interval.ms": "5000",
}


@pytest.fixture(scope="module")
def static_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("synonyms"), overrides=STATIC_OVERRIDES) as b:
        yield b


def test_synonyms_of_every_chain_as_kafka_lists_them(static_broker: BrokerProcess) -> None:
    client = WireClient(static_broker.port)
    try:
        _check_synonyms(client)
    finally:
        client.close()


def _check_synonyms(client: WireClient) -> None:
    assert create_topic(client, "chains").error_code == ErrorCode.none
    assert create_topic(client, "kept", configs={"retention.ms": "5000"}).error_code == 0
    topic = describe(client, TOPIC, "chains")
    # Nothing dynamic: a chain's first key is set nowhere, so Kafka lists no synonym (it
    # drops what comes before the first key's own entry) and names the source default,
    # even where a lower key of the chain is set in server.properties.
    for name, value in [
        ("retention.ms", "7200000"),  # log.retention.minutes=120
        ("segment.ms", "86400000"),  # log.roll.hours=24
        ("segment.jitter.ms", "0"),
        ("flush.ms", "5000"),  # log.flush.scheduler.interval.ms=5000
        ("remote.storage.enable", "false"),  # no broker key at all
    ]:
        assert (shown(topic[name]), synonyms(topic[name])) == ((value, DEFAULT), []), name
    # A one-key chain: its default is listed.
    assert synonyms(topic["segment.bytes"]) == [("log.segment.bytes", "1073741824", DEFAULT)]
    assert synonyms(describe(client, TOPIC, "kept")["retention.ms"]) == [
        ("retention.ms", "5000", TOPIC_SRC)
    ]

    per_broker = {"log.retention.ms": "1800000", "log.roll.ms": "60000"}
    per_broker["log.flush.interval.ms"] = "2000"
    default = {"log.retention.ms": "3600000", "log.roll.jitter.ms": "10"}
    ops = [(k, SET, v) for k, v in per_broker.items()]
    default_ops = [(k, SET, v) for k, v in default.items()]
    assert errors(incremental(client, [(BROKER, "0", ops), (BROKER, "", default_ops)])) == [
        OK,
        OK,
    ]
    try:
        retention = [
            ("log.retention.ms", "1800000", BROKER_SRC),
            ("log.retention.ms", "3600000", DEFAULT_BROKER_SRC),
            ("log.retention.minutes", "120", STATIC),
            ("log.retention.hours", "168", DEFAULT),
        ]
        roll = [
            ("log.roll.ms", "60000", BROKER_SRC),
            ("log.roll.hours", "24", STATIC),
            ("log.roll.hours", "168", DEFAULT),
        ]
        jitter = [
            ("log.roll.jitter.ms", "10", DEFAULT_BROKER_SRC),
            ("log.roll.jitter.hours", "0", DEFAULT),
        ]
        flush = [
            ("log.flush.interval.ms", "2000", BROKER_SRC),
            ("log.flush.scheduler.interval.ms", "5000", STATIC),
            ("log.flush.scheduler.interval.ms", LONG_MAX, DEFAULT),
        ]
        topic = describe(client, TOPIC, "chains")
        for name, value, source, expected in [
            ("retention.ms", "1800000", BROKER_SRC, retention),
            ("segment.ms", "60000", BROKER_SRC, roll),
            ("segment.jitter.ms", "10", DEFAULT_BROKER_SRC, jitter),
            ("flush.ms", "2000", BROKER_SRC, flush),
        ]:
            assert (shown(topic[name]), synonyms(topic[name])) == ((value, source), expected)
        kept = describe(client, TOPIC, "kept")["retention.ms"]
        assert synonyms(kept) == [("retention.ms", "5000", TOPIC_SRC), *retention]

        brokers = describe(client, BROKER, "0")
        for name, value, source, expected in [
            ("log.retention.ms", "1800000", BROKER_SRC, retention),
            ("log.retention.minutes", "120", STATIC, retention[2:]),
            ("log.retention.hours", "168", DEFAULT, retention[3:]),
            ("log.roll.ms", "60000", BROKER_SRC, roll),
            ("log.roll.hours", "24", STATIC, roll[1:]),
            ("log.roll.jitter.ms", "10", DEFAULT_BROKER_SRC, jitter),
            ("log.roll.jitter.hours", "0", DEFAULT, jitter[1:]),
            ("log.flush.interval.ms", "2000", BROKER_SRC, flush),
            # log.flush.scheduler.interval.ms has no other key in its own chain
            ("log.flush.scheduler.interval.ms", "5000", STATIC, flush[1:]),
        ]:
            entry = brokers[name]
            assert (shown(entry), synonyms(entry)) == ((value, source), expected), name
            assert entry.read_only == (name not in ALL_DYNAMIC_BROKER_KEYS)
        # The cluster default lists its own level only.
        defaults = describe(client, BROKER, "")
        assert {n: (shown(e), synonyms(e)) for n, e in defaults.items()} == {
            "log.retention.ms": (("3600000", DEFAULT_BROKER_SRC), retention[1:2]),
            "log.roll.jitter.ms": (("10", DEFAULT_BROKER_SRC), jitter[:1]),
        }
    finally:
        delete(client, "0", *per_broker)
        delete(client, "", *default)
    # A chain's first key unset again, at a level below a lower key: not listed.
    assert set_one(client, "", "log.retention.ms", "3600000") == OK
    try:
        entry = describe(client, BROKER, "0")["log.retention.minutes"]
        assert synonyms(entry) == [
            ("log.retention.minutes", "120", STATIC),
            ("log.retention.hours", "168", DEFAULT),
        ]
    finally:
        delete(client, "", "log.retention.ms")


# -- the handler pool's resize, as pure code ------------------------------------------------


def test_handler_pool_grows_and_shrinks_without_losing_a_request() -> None:
    import asyncio
    import dataclasses

    from gregor.server.network import Limits, Request, SocketServer

    async def run() -> None:
        handled: list[int] = []
        limits = Limits(4, 500, 1 << 20, -1, 100, 100, {}, -1, -1)
        server_ = SocketServer(lambda conn, frame: handled.append(frame[0]), limits)
        server_.start_handlers()
        await asyncio.sleep(0)  # every handler waits for a request
        server_.reconfigure(dataclasses.replace(limits, io_threads=9))
        assert server_.handler_count == 9
        # A request arrives and wakes a handler (the longest waiting, the first) that is
        # then retired before it runs: the request is handed to another handler.
        server_.channel.submit(Request(None, b"\x01"))  # type: ignore[arg-type]
        server_._workers.append(server_._workers.pop(0))  # the woken one retires first
        server_.reconfigure(dataclasses.replace(limits, io_threads=1))
        assert server_.handler_count == 1
        for _ in range(5):
            await asyncio.sleep(0)
        assert handled == [1]
        for i in range(2, 6):
            server_.channel.submit(Request(None, bytes([i])))  # type: ignore[arg-type]
        for _ in range(20):
            await asyncio.sleep(0)
        assert sorted(handled) == [1, 2, 3, 4, 5]
        for worker in server_._workers:
            worker.cancel()

    asyncio.run(run())
