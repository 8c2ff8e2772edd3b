"""`scripts/bench security`: the SCRAM load against a real secured broker (every
authentication counted by the broker is one the load completed), the ACL set and its
decisions, and the tables."""

from __future__ import annotations

from pathlib import Path

from benchmark import acl_cost
from benchmark.security import acl_tables, run_scram, throughput_table

from gregor.controller.acls.model import AclOperation, ResourceType


def test_scram_load_is_counted_by_the_broker(tmp_path: Path) -> None:
    results = run_scram(tmp_path, seconds=1.0, processes=1, connections=2)
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        m = results[listener]
        assert m["failures"] == 0, listener
        assert m["client_authentications"] > 0, listener
        assert m["broker_authentications"] == m["client_authentications"], listener
        assert m["authentications_s"] > 0 and m["broker_cpu_ms_per_authentication"] > 0


def test_the_acl_set_has_10000_distinct_acls_deciding_as_described() -> None:
    assert len(set(acl_cost.acls())) == acl_cost.ACLS
    authorizer = acl_cost.authorizer_with_acls()
    assert authorizer.count() == acl_cost.ACLS

    def allowed(principal: str, operation: AclOperation, topic: str) -> bool:
        return authorizer.authorize(principal, "127.0.0.1", operation, ResourceType.TOPIC, topic)

    assert allowed(acl_cost.CLIENT, AclOperation.WRITE, acl_cost.TOPIC_BATCH)
    assert allowed(acl_cost.CLIENT, AclOperation.READ, acl_cost.TOPIC_SMALL)
    assert not allowed("User:mallory", AclOperation.WRITE, acl_cost.TOPIC_BATCH)
    assert not allowed(acl_cost.CLIENT, AclOperation.READ, "topic-17")
    assert allowed("User:service-3", AclOperation.WRITE, "svc3-orders")  # prefixed
    assert authorizer.denied == 2 and authorizer.allowed == 3


def test_tables_show_ratios_to_the_baseline() -> None:
    plain = {"produce_mib_s": 500.0, "consume_mib_s": 800.0}
    tls = {"produce_mib_s": 350.0, "consume_mib_s": 600.0}
    cpu = {"cpu_s_per_gib_produce": 1.5, "cpu_s_per_gib_consume": 0.5}
    table = throughput_table({"confluent": {"PLAINTEXT": plain | cpu, "SSL": tls | cpu}})
    assert "| confluent | SSL | 350.0 | 0.70 | 600.0 | 0.75 | 1.50 | 0.50 |" in table
    per_request = {"fetch 100 B": {"none_us": 100.0, "own_us": 102.0, "all_us": 103.0}}
    acls = acl_tables(per_request, {}, {"fetch": 2.5})
    assert "| fetch 100 B | 100.0 | 102.0 | 103.0 | 1.030 |" in acls
    assert "| fetch (of fetch 100 B) | 2.50 | 2.5% |" in acls
