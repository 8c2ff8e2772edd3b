"""The transactions scenario (issue #7): the Java producer's transactional throughput with
1 KiB records in transactions of 100 and of 10,000 records, each as a ratio to idempotent
non-transactional produce on the same broker; commitTransaction's p50/p99; and read_committed
consume throughput of the transactional data as a ratio to read_uncommitted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .drivers import DriverError, _phase

if TYPE_CHECKING:  # scenarios imports this module
    from .scenarios import Context

RECORD_SIZE = 1024
SMALL_TXN = 100
BIG_TXN = 10_000
IDEMPOTENT = {"enable.idempotence": "true", "acks": "all"}

Measurements = dict[str, float]


def transactional_throughput(ctx: Context) -> Measurements:
    java = ctx.java
    if java is None:
        raise DriverError("Java driver not prepared")
    endpoint = ctx.broker.endpoint
    sizes = ctx.sizes
    # At least two of the big transactions, whatever the size preset.
    records = max(sizes.throughput_bytes // RECORD_SIZE, 2 * BIG_TXN)
    seconds = sizes.phase_seconds
    timeout = seconds + 180

    def produce(mode: str, extra: dict[str, object]) -> tuple[str, dict[str, Any]]:
        topic = ctx.new_topic()
        options: dict[str, object] = {"topic": topic, "size": RECORD_SIZE, "records": records}
        options |= {"seconds": seconds, **extra}
        options |= {f"p.{key}": value for key, value in IDEMPOTENT.items()}
        return topic, java.run(mode, endpoint, options, timeout=timeout)

    def consume(topic: str, produced: int, isolation: str) -> dict[str, Any]:
        options = {"topic": topic, "records": produced, "seconds": seconds}
        result = java.run(
            "consume", endpoint, {**options, "c.isolation.level": isolation}, timeout=timeout
        )
        if result["records"] != produced:
            raise DriverError(f"{isolation}: consumed {result['records']} of {produced}")
        return result

    out: Measurements = {}
    _, base = produce("produce", {})
    idempotent = _phase(base)
    out |= {"idem_mib_s": idempotent.mib_per_s, "idem_rec_s": idempotent.records_per_s}
    big_topic = ""
    big_records = 0
    for name, per_txn in (("txn100", SMALL_TXN), ("txn10k", BIG_TXN)):
        topic, result = produce("txn-produce", {"txn": per_txn})
        phase = _phase(result)
        out |= {
            f"{name}_mib_s": phase.mib_per_s,
            f"{name}_rec_s": phase.records_per_s,
            f"{name}_ratio": phase.mib_per_s / idempotent.mib_per_s,
            f"{name}_commit_p50_ms": float(result["commit_p50_ms"]),
            f"{name}_commit_p99_ms": float(result["commit_p99_ms"]),
        }
        big_topic, big_records = topic, phase.records
    committed = _phase(consume(big_topic, big_records, "read_committed"))
    uncommitted = _phase(consume(big_topic, big_records, "read_uncommitted"))
    out |= {
        "rc_mib_s": committed.mib_per_s,
        "rc_rec_s": committed.records_per_s,
        "ru_mib_s": uncommitted.mib_per_s,
        "ru_rec_s": uncommitted.records_per_s,
        "rc_ratio": committed.mib_per_s / uncommitted.mib_per_s,
    }
    return out
