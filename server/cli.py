"""The ``gregor`` command line, in the habits of Kafka's scripts.

``gregor serve [server.properties] [--override key=value ...]`` starts a broker like
``kafka-server-start.sh``; SIGTERM or SIGINT shut it down cleanly.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from functools import partial
from pathlib import Path

import anyio

from log.errors import KafkaStorageError
from server.config import BrokerConfig, ConfigError, read_properties
from server.polling import new_event_loop

logger = logging.getLogger("gregor")


def _parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"override must look like key=value, got {text!r}")
    return key.strip(), value.strip()


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )


async def _serve(config: BrokerConfig) -> None:
    from server.broker import Broker

    broker = Broker(config)
    try:
        await broker.start()
    except BaseException:
        # Start-up failed after the listeners opened: close the connections already accepted
        # (a client probing the port), so the fatal error is the process's last log line.
        await broker.socket_server.stop_accepting()
        await broker.socket_server.drain(1.0)
        raise
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(broker.run_background)
            async for signum in signals:
                logger.info("Received %s", signal.Signals(signum).name)
                break
            tg.cancel_scope.cancel()
    await broker.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gregor", description="A Kafka-compatible broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker (like kafka-server-start.sh)")
    serve.add_argument("properties", nargs="?", type=Path, help="a server.properties file")
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        type=_parse_override,
        metavar="key=value",
        help="set a property, overriding the file",
    )
    args = parser.parse_args(argv)
    # kio builds hypothesis strategies for its types whenever hypothesis is importable
    # (it is in a test environment): ~200 MB and a second of start-up a broker never needs.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    _configure_logging()
    props = read_properties(args.properties) if args.properties else {}
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


if __name__ == "__main__":
    sys.exit(main())
