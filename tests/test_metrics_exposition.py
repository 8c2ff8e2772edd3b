"""The metrics endpoint's parts without a broker: the sliced exposition against
prometheus_client's own encoders (byte for byte, both formats), how long a scrape of
50,000 partitions holds the event loop at a time, and scrapes shared between callers."""

from __future__ import annotations

import asyncio
import gc
import gzip
import time
from array import array

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from gregor.server.metrics import BrokerMetrics
from gregor.server.metrics_exporter import (
    OPENMETRICS,
    TEXT,
    Exposition,
    Scrapes,
    build,
    reference_families,
)
from gregor.server.metrics_state import BrokerState, GroupOffset, Logs, LogState


class _Families:
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self) -> list:
        return self.families


def _metrics(topics: int) -> BrokerMetrics:
    metrics = BrokerMetrics()
    for t in range(topics):
        metrics.produced(f"topic-{t}", 1000 * t + 7, 10 * t)
        metrics.fetched(f"topic-{t}", 123_456_789 * t)
    ms = 1_000_000
    produce = [0, 9, 0, ms // 10, 0, ms // 2, 3 * ms, 1, metrics]
    fetch = [1, 12, 0, 0, ms // 10, 400 * ms, 401 * ms, 0, metrics]
    metrics.batch = [produce, fetch, list(produce)]
    for stats in list(metrics.requests.values())[:30]:  # many request types seen
        stats.versions[0] += 3
        stats.data[::7] = array("q", range(1, len(stats.data[::7]) + 1))
    metrics.flush()
    return metrics


def _state(partitions: int, group_offsets: int) -> BrokerState:
    logs = Logs.of(
        LogState(
            f"topic-{i % 97}",
            i // 97,
            pow(10, i % 13, 10**12) + i,
            i,
            2 * i + 10**7 * (i % 3),
            1 + i % 4,
        )
        for i in range(partitions)
    )
    groups = [
        GroupOffset(f'g"roup\\{i % 5}\n', f"topic-{i % 97}", i // 97, i, i - 2 * (i % 2) * i)
        for i in range(group_offsets)
    ]
    return BrokerState(partitions, partitions - 3, 2, 1, True, logs, groups)


def _built(metrics: BrokerMetrics, state: BrokerState | None) -> Exposition:
    async def read() -> BrokerState:
        if state is None:
            raise RuntimeError("no state")
        return state

    return asyncio.run(build(metrics, read, lambda: (1, 2, 3, 4, 5, 0.25, 0.125, 8)))


@pytest.mark.parametrize("with_state", [True, False])
def test_the_exposition_is_byte_for_byte_what_prometheus_client_encodes(with_state: bool) -> None:
    metrics = _metrics(150)
    state = _state(5000, 300) if with_state else None
    exposition = _built(metrics, state)
    reference = _Families(list(reference_families(metrics, state, (1, 2, 3, 4, 5, 0.25, 0.125, 8))))
    assert exposition.body(TEXT) == generate_latest(reference)
    assert exposition.body(OPENMETRICS) == openmetrics.generate_latest(reference)
    for fmt in (TEXT, OPENMETRICS):
        assert gzip.decompress(b"".join(asyncio.run(exposition.gzipped(fmt)))) == (
            exposition.body(fmt)
        )


def test_a_scrape_of_50000_partitions_holds_the_event_loop_a_few_milliseconds_at_most() -> None:
    """Measured in CPU time of the loop's thread between two turns of another task: wall
    time on a shared 2-core machine counts the other processes' time slices too."""
    metrics = _metrics(1000)
    state = _state(50_000, 5000)

    async def scrape() -> tuple[float, float, int]:
        holds: list[float] = []
        done = False

        async def ticker() -> None:
            last = time.thread_time()
            while not done:
                await asyncio.sleep(0)
                now = time.thread_time()
                holds.append(now - last)
                last = now

        async def read() -> BrokerState:
            return state

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = time.thread_time()
        exposition = await build(metrics, read, lambda: (0,) * 8)
        took = time.thread_time() - start
        done = True
        await task
        return max(holds), took, len(exposition.body(TEXT))

    # As the broker after start-up (server/cli/serve.py): what exists is frozen, so a
    # collection in the middle of the scrape scans the scrape's objects only, not those
    # the tests before this one left in this worker (260 ms of them once).
    gc.collect()
    gc.freeze()
    try:
        longest, took, size = result = asyncio.run(scrape())
    finally:
        gc.unfreeze()
    print(
        f"50,000 partitions: {size / 1e6:.1f} MB in {took * 1000:.0f} ms of CPU, longest "
        f"hold {longest * 1000:.1f} ms"
    )
    assert size > 50_000 * 4 * 40, result
    assert longest < 0.010, result  # about 2.5 ms


def test_concurrent_callers_share_one_computation_and_later_ones_see_a_fresh_one() -> None:
    computed: list[float] = []

    async def scenario() -> None:
        gate = asyncio.Event()

        async def compute() -> Exposition:
            computed.append(time.monotonic())
            await gate.wait()
            return Exposition()

        scrapes = Scrapes(compute, min_interval_s=0.0, cost_factor=0.0)
        first = [asyncio.create_task(scrapes.get()) for _ in range(50)]
        await asyncio.sleep(0.01)
        assert len(computed) == 1
        # Callers arriving while one is computed wait for the next one, which they share.
        later = [asyncio.create_task(scrapes.get()) for _ in range(20)]
        await asyncio.sleep(0.01)
        assert len(computed) == 1
        gate.set()
        firsts, laters = await asyncio.gather(*first), await asyncio.gather(*later)
        assert len(computed) == 2 and scrapes.computed == 2
        assert all(e is firsts[0] for e in firsts) and all(e is laters[0] for e in laters)
        assert firsts[0] is not laters[0]

    asyncio.run(scenario())


def test_computations_start_an_interval_apart() -> None:
    computed: list[float] = []

    async def compute() -> Exposition:
        computed.append(time.monotonic())
        await asyncio.sleep(0.02)
        exposition = Exposition()
        exposition.steps.cpu = 0.02  # what the event loop spent on it
        return exposition

    async def scenario() -> None:
        scrapes = Scrapes(compute, min_interval_s=0.1, cost_factor=10.0)
        for _ in range(3):
            await scrapes.get()
        assert scrapes.interval() >= 0.2  # ten times what the last one took
        await scrapes.get()

    asyncio.run(scenario())
    gaps = [b - a for a, b in zip(computed, computed[1:], strict=False)]
    assert gaps[0] >= 0.2 - 0.005 and gaps[1] >= 0.2 - 0.005 and gaps[2] >= 0.2 - 0.005, gaps


def test_a_failed_computation_fails_its_callers_and_the_next_one_recovers() -> None:
    calls = 0

    async def compute() -> Exposition:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("boom")
        return Exposition()

    async def scenario() -> None:
        scrapes = Scrapes(compute, min_interval_s=0.0)
        with pytest.raises(ValueError):
            await scrapes.get()
        assert isinstance(await scrapes.get(), Exposition)

    asyncio.run(scenario())
