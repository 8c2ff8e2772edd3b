"""``gregor serve [server.properties] [--override key=value ...]``: a broker in the
foreground, like ``kafka-server-start.sh``; SIGTERM or SIGINT shut it down cleanly."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from functools import partial

import anyio

from gregor.log.errors import KafkaStorageError
from gregor.server.config import BrokerConfig, ConfigError, read_properties
from gregor.server.polling import new_event_loop

logger = logging.getLogger("gregor")


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )


async def _serve(config: BrokerConfig) -> None:
    from gregor.server.broker import Broker

    broker = Broker(config)
    await broker.start()
    gc.freeze()
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(broker.run_background)
            async for signum in signals:
                logger.info("Received %s", signal.Signals(signum).name)
                break
            tg.cancel_scope.cancel()
        # The handlers stay while the broker shuts down: a second signal (a supervisor's,
        # or a harness stopping what it already signalled) is logged, not fatal, as Kafka's
        # shutdown hook runs to its end; cut short, every log is recovered at the next start.
        async with anyio.create_task_group() as tg:
            tg.start_soon(_log_signals_during_shutdown, signals)
            await broker.shutdown()
            tg.cancel_scope.cancel()


async def _log_signals_during_shutdown(signals: AsyncIterator[int]) -> None:
    async for signum in signals:
        logger.info(
            "Received %s while shutting down; the shutdown goes on", signal.Signals(signum).name
        )


class PauseLog:
    """A gc callback logging every collection that held the process for `threshold_s` or
    more (the JVM's GC log): a full collection walks all of a broker's partition state
    created since start-up, seconds at 50,000 partitions."""

    def __init__(self, threshold_s: float) -> None:
        self._threshold_s = threshold_s
        self._started = (0.0, 0.0)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
            return
        elapsed = time.perf_counter() - self._started[0]
        if elapsed >= self._threshold_s:
            # The thread's CPU time tells a long collection from one the machine held up.
            logger.info(
                "Garbage collection of generation %d took %.0f ms, %.0f ms of CPU (%d unreachable)",
                info["generation"],
                elapsed * 1000,
                (time.thread_time() - self._started[1]) * 1000,
                info["collected"] + info["uncollectable"],
            )


def run(args: argparse.Namespace) -> int:
    _configure_logging()
    # A broker holds millions of long-lived objects (partition state, indexes, group
    # metadata); collecting the young generation less often, and freezing what start-up
    # built (below), keeps full collections from scanning them again and again (with
    # 10,000 partitions, collections took most of a failover's time).
    gc.set_threshold(50_000, 20, 50)
    gc.callbacks.append(PauseLog(0.1))
    try:
        props = read_properties(args.properties) if args.properties else {}
    except OSError as e:
        logger.error("Fatal error during startup: cannot read %s: %s", args.properties, e.strerror)
        return 1
    except ValueError as e:  # a malformed escape, as java.util.Properties refuses it
        logger.error("Fatal error during startup: cannot read %s: %s", args.properties, e)
        return 1
    props.update(dict(args.override))
    try:
        config = BrokerConfig(props)
        loop_factory = partial(new_event_loop, config["gregor.idle.poll.us"])
        anyio.run(_serve, config, backend_options={"loop_factory": loop_factory})
    except ConfigError as e:
        logger.error("Fatal error during startup: %s", e)
        return 1
    except (OSError, KafkaStorageError) as e:  # a port taken, a log dir locked or unwritable
        logger.error("Fatal error: %s", e)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
