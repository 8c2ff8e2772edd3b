"""What every suite of the repository shares: the lanes' markers applied by rule, and the
broker processes shared between test modules.

Markers (registered in pyproject.toml; ``./scripts/test --quick`` selects by them): a test
that uses a ``cluster`` or ``zookeeper`` fixture, or the compatibility tests' "cluster"
mode (a fixture parametrized "cluster"), is ``cluster``; a test of the ``compat`` matrix
for the Java client (Spark and Connect included) is ``jvm``; whole modules (or tests) are
``slow`` or ``serial`` by ``MARKS``. ``smoke`` marks what the quick lane keeps of those:
the first test against one broker of each (client, feature) cell of the compatibility
matrix, and ``SMOKE``.

Shared processes: ``process_pool`` (one per session, so one per xdist worker) holds one
broker, cluster or compatibility-mode cluster per set of overrides, started when a module
first asks for it and kept for the next module asking for the same. After each test, every
pooled process a test stopped, killed or paused runs again. A module that changes what the
broker holds for everyone (quotas, dynamic configs) or needs fixed topic names starts its
own broker instead, and says why.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests.process_pool import ProcessPool

# The quick lane's cluster smoke; its compatibility picks are made by rule (``_smoke``).
SMOKE = {"tests/test_cluster.py::test_acks_all_produce_and_consume_with_identical_replicas"}
CLUSTER_FIXTURES = {"cluster", "zookeeper"}
# Marks by module (or by test). serial: they measure rates or latency, which a test beside
# them would skew. slow: their tests take seconds to minutes each. cluster, jvm: what their
# fixtures do not show (a cluster or a Java process started in the test).
MEGA = "tests/test_admin_mega_requests.py"
CLIENTS = "tests/test_security_clients.py"
MARKS = {
    MEGA: ("slow",),
    f"{MEGA}::test_big_create_and_grow_keep_other_clients_prompt": ("serial",),
    f"{MEGA}::test_create_costs_the_same_with_ten_or_two_thousand_topics": ("serial",),
    "tests/test_connection_quotas.py": ("serial", "slow"),
    "tests/test_cluster_quotas.py": ("serial",),
    "tests/test_network_pool.py": ("serial", "slow"),
    "tests/test_polling.py": ("serial",),
    "tests/test_storage_disk_work.py": ("serial", "slow"),
    "compat_tests/test_quotas.py": ("serial", "slow"),
    "tests/test_group_hostile.py": ("slow",),
    "tests/test_log_compaction.py": ("slow",),
    "tests/test_metrics_hostile.py": ("serial", "slow"),
    "tests/test_network_hostile.py": ("slow",),
    "tests/test_packaging.py": ("slow",),
    "tests/test_storage_scale.py": ("slow",),
    # They wait out fixed times: the broker's 5 s keystore check, SASL sessions' ends.
    "tests/test_tls_listeners.py::test_a_changed_keystore_file_is_reloaded": ("slow",),
    "tests/test_sasl_listeners.py::test_an_expired_session_is_closed_at_its_next_request": (
        "slow",
    ),
    f"{CLIENTS}::test_tools_connection_reauthenticates_before_its_session_expires": ("slow",),
    f"{CLIENTS}::test_inter_broker_client_authenticates_and_reauthenticates": ("slow",),
    # It waits out the 10 s batch of regex subscriptions' refresh (Kafka's).
    "tests/test_consumer_group_regex.py::test_created_and_deleted_topics": ("slow",),
    "tests/test_cli_cluster.py": ("cluster",),
    "tests/test_consumer_group_racks.py": ("cluster",),
    "tests/test_cluster_script.py": ("cluster",),
    "compat_tests/test_crash_recovery.py": ("slow",),
    "compat_tests/test_groups_aiokafka.py": ("slow",),
    "compat_tests/test_groups_confluent.py": ("slow",),
    "compat_tests/test_groups_kafka_python.py": ("slow",),
    "compat_tests/test_groups_kcat.py": ("slow",),
    "compat_tests/test_pinned_versions.py": ("slow",),
    "compat_tests/test_power_loss.py": ("slow",),
    "compat_tests/test_sasl.py": ("slow",),
    "compat_tests/test_tls.py": ("slow",),
    "compat_tests/test_transactions_aiokafka.py": ("slow",),
    "compat_tests/test_transactions_compaction.py": ("slow",),
    "compat_tests/test_transactions_confluent.py": ("slow",),
    "compat_tests/test_transactions_kafka_python.py": ("slow",),
    "compat_tests/test_transactions_loop.py": ("slow", "cluster"),
    "scripts/benchmark/tests/test_bench_cluster.py": ("slow", "cluster"),
    "scripts/benchmark/tests/test_bench_spark.py": ("slow", "jvm"),
    "scripts/benchmark/tests/test_bench_tansu_run.py": ("slow", "jvm"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        test = item.nodeid.split("[")[0]
        for name in MARKS.get(test.split("::")[0], ()) + MARKS.get(test, ()):
            item.add_marker(name)
        if _cluster_mode(item) or CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
        if any(mark.args[:1] == ("java",) for mark in item.iter_markers("compat")):
            item.add_marker(pytest.mark.jvm)
    for item in _smoke(items):
        item.add_marker(pytest.mark.smoke)
    # The long modules first, so that under xdist none of them starts last and runs alone.
    long = {item.nodeid.split("::")[0] for item in items if _is_long(item)}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in long)


def _smoke(items: list[pytest.Item]) -> Iterator[pytest.Item]:
    """``SMOKE``, and the first test run against one broker of each client and feature
    of the compatibility matrix: one round trip per client and feature."""
    seen: set[tuple[str, str]] = set()
    for item in items:
        pairs = {mark.args[:2] for mark in item.iter_markers("compat")} - seen
        if item.nodeid in SMOKE or (pairs and not _cluster_mode(item)):
            seen |= pairs
            yield item


def _cluster_mode(item: pytest.Item) -> bool:
    """Parametrized "cluster": the compatibility tests' ``broker``, or a module's own fixture
    of the same modes (compat_tests/test_tls.py's ``secured``)."""
    params = getattr(item, "callspec", None)
    return params is not None and "cluster" in params.params.values()


def _is_long(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) for name in ("slow", "cluster", "jvm"))


@pytest.fixture(scope="session")
def process_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessPool]:
    pool = ProcessPool(tmp_path_factory)
    yield pool
    pool.close()


@pytest.fixture(autouse=True)
def _restore_pooled_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that stops, kills or pauses a shared broker leaves the next one it running."""
    yield
    if "process_pool" in request.fixturenames:  # asked for by the test or its fixtures
        request.getfixturevalue("process_pool").restore()
