"""pytest fixtures that run a real Gregor broker for an application's own tests (the
``pytest11`` entry point ``gregor``; installing the package enables it).

Nothing starts unless a test asks for a fixture. ``gregor_broker`` is one broker process
for the whole session by default (the ``gregor_broker_scope`` ini option picks another
scope); every test gets fresh topics from ``gregor_topic`` or ``gregor_topic_factory``::

    def test_round_trip(gregor_bootstrap, gregor_topic):
        producer = confluent_kafka.Producer({"bootstrap.servers": gregor_bootstrap})
        ...

    @pytest.mark.gregor_topic(partitions=3, config={"cleanup.policy": "compact"})
    def test_compacted(gregor_topic): ...

    def test_survives_a_crash(gregor_broker, gregor_topic):
        ...  # produce with acks=all
        gregor_broker.kill()  # kill -9, then a start that recovers the logs
        ...  # every acknowledged record is still there

Override the ``gregor_broker_overrides`` fixture (session scope) to give the broker
server.properties settings, and ``gregor_broker_security`` to secure it (``secured.py``:
TLS, a SASL mechanism, the ACL authorizer); ``gregor_admin_config`` (a super user) and
``gregor_client_config`` (``alice``, allowed what ACLs grant) say how to connect, in each
client's style::

    @pytest.fixture(scope="session")
    def gregor_broker_security():
        return BrokerSecurity(tls=True, sasl_mechanism="SCRAM-SHA-512", authorizer=True)

    def test_secured(gregor_client_config, gregor_topic):
        producer = confluent_kafka.Producer(gregor_client_config.confluent())
        consumer = kafka.KafkaConsumer(**gregor_client_config.kafka_python())
        gregor_client_config.write(path)  # Java's client.properties, --command-config
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Literal, get_args

import pytest

from gregor.server.harness.broker_process import BrokerProcess
from gregor.server.harness.secured import ADMIN, USER, BrokerSecurity, ClientConfig, SecuredBroker

_Scope = Literal["session", "package", "module", "class", "function"]
_SCOPES: tuple[_Scope, ...] = get_args(_Scope)
_TOPIC_MARKER = "gregor_topic"
_ILLEGAL_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "gregor_broker_scope",
        "scope of the gregor_broker and gregor_bootstrap fixtures: " + ", ".join(_SCOPES),
        default="session",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_TOPIC_MARKER}(partitions=1, config=None): how the gregor_topic fixture creates "
        "the test's topic (partition count, topic configs)",
    )


def _broker_scope(fixture_name: str, config: pytest.Config) -> _Scope:
    scope = str(config.getini("gregor_broker_scope"))
    for known in _SCOPES:
        if scope == known:
            return known
    raise pytest.UsageError(f"gregor_broker_scope must be one of {_SCOPES}, got {scope!r}")


@pytest.fixture(scope="session")
def gregor_broker_overrides() -> dict[str, str]:
    """server.properties settings for the broker; override this fixture to set some."""
    return {}


@pytest.fixture(scope="session")
def gregor_broker_security() -> BrokerSecurity | None:
    """How the broker is secured (None: PLAINTEXT, everyone allowed everything); override
    this fixture to return a ``BrokerSecurity``."""
    return None


@pytest.fixture(scope=_broker_scope)
def _gregor_secured(
    tmp_path_factory: pytest.TempPathFactory, gregor_broker_security: BrokerSecurity | None
) -> SecuredBroker | None:
    if gregor_broker_security is None:
        return None
    return SecuredBroker(tmp_path_factory.mktemp("gregor-tls"), gregor_broker_security)


@pytest.fixture(scope=_broker_scope)
def gregor_broker(
    tmp_path_factory: pytest.TempPathFactory,
    gregor_broker_overrides: dict[str, str],
    _gregor_secured: SecuredBroker | None,
) -> Iterator[BrokerProcess]:
    """A running broker in a temporary directory; ``restart()`` stops it cleanly and starts
    it again, ``kill()`` kills it with SIGKILL and starts it again (recovery), both on the
    same port and data."""
    secured = _gregor_secured
    overrides = {**(secured.overrides() if secured else {}), **gregor_broker_overrides}
    with BrokerProcess(
        tmp_path_factory.mktemp("gregor"),
        overrides,
        client_config=secured.harness_config() if secured else None,
    ) as broker:
        if secured is not None:
            secured.after_start(broker.bootstrap)
        yield broker


@pytest.fixture(scope=_broker_scope)
def gregor_bootstrap(gregor_broker: BrokerProcess) -> str:
    """The broker's ``bootstrap.servers`` address, ``127.0.0.1:<port>``."""
    return gregor_broker.bootstrap


@pytest.fixture(scope=_broker_scope)
def gregor_admin_config(
    gregor_broker: BrokerProcess, _gregor_secured: SecuredBroker | None
) -> ClientConfig:
    """How a super user connects: ``.confluent()``, ``.kafka_python()``, ``.properties()``
    (Kafka's client properties), ``.write(path)`` (them as a file)."""
    if _gregor_secured is None:
        return ClientConfig(gregor_broker.bootstrap)
    return _gregor_secured.client(ADMIN, gregor_broker.bootstrap)


@pytest.fixture(scope=_broker_scope)
def gregor_client_config(
    gregor_broker: BrokerProcess, _gregor_secured: SecuredBroker | None
) -> ClientConfig:
    """How the ordinary user ``alice`` connects (as ``gregor_admin_config``); with the
    authorizer she may do what ACLs allow her."""
    if _gregor_secured is None:
        return ClientConfig(gregor_broker.bootstrap)
    return _gregor_secured.client(USER, gregor_broker.bootstrap)


@pytest.fixture
def gregor_topic_factory(
    gregor_broker: BrokerProcess, request: pytest.FixtureRequest
) -> Callable[..., str]:
    """``create(partitions=1, config=None) -> name``: a new topic named after the test,
    created and led on every partition when it returns."""
    stem = _ILLEGAL_TOPIC_CHARS.sub("-", request.node.name)[:180].strip("-.") or "topic"

    def create(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{stem}-{uuid.uuid4().hex[:10]}"
        gregor_broker.create_topic(name, partitions, config)
        return name

    return create


@pytest.fixture
def gregor_topic(gregor_topic_factory: Callable[..., str], request: pytest.FixtureRequest) -> str:
    """A fresh topic for this test (one partition unless ``@pytest.mark.gregor_topic``
    says otherwise)."""
    marker = request.node.get_closest_marker(_TOPIC_MARKER)
    return gregor_topic_factory(**(marker.kwargs if marker else {}))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    broker = getattr(item, "funcargs", {}).get("gregor_broker")
    if report.failed and isinstance(broker, BrokerProcess):
        report.sections.append((f"gregor broker log ({broker.log_path})", broker.log_tail()))
    return report
