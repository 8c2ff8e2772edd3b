"""A confluent-kafka ShareConsumer in a process of its own, with the options and output lines
of ``GregorClient share-consume`` (compat_tests/java/GregorClient.java; read by
``compat_tests/share_checks.py``):

    python confluent_share_member.py BOOTSTRAP TOPIC GROUP [--ack implicit|explicit]
        [--release VALUE=N]... [--reject VALUE]... [--hold-after N] [--config k=v]...
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer, TopicPartition


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--ack", default="implicit", choices=("implicit", "explicit"))
    parser.add_argument("--release", action="append", default=[])
    parser.add_argument("--reject", action="append", default=[])
    parser.add_argument("--hold-after", type=int, default=-1)
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args()
    release = {v: int(n) for v, n in (kv.split("=", 1) for kv in args.release)}
    configs = dict(kv.split("=", 1) for kv in args.config)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "share.acknowledgement.mode": args.ack,
            **configs,
        }
    )

    def acknowledged(offsets: dict[TopicPartition, set[int]], error: Exception | None) -> None:
        if error is not None:
            for tp, done in offsets.items():
                say(
                    event="ack-failed",
                    partition=tp.partition,
                    offsets=sorted(done),
                    error=str(error),
                )

    consumer.set_acknowledgement_commit_callback(acknowledged)
    closing = threading.Event()

    def wait_for_stdin() -> None:
        sys.stdin.readline()  # any line or EOF
        closing.set()

    threading.Thread(target=wait_for_stdin, daemon=True).start()
    consumer.subscribe([args.topic])
    received = 0
    try:
        while not closing.is_set() and (args.hold_after < 0 or received < args.hold_after):
            for message in consumer.poll(0.2):
                if message.error() is not None:
                    say(error=str(message.error()))
                    continue
                value = (message.value() or b"").decode()
                count = message.delivery_count() or -1  # None: not a share fetch's record
                ack = "IMPLICIT"
                if args.ack == "explicit":
                    if value in args.reject:
                        kind = AcknowledgeType.REJECT
                    elif value in release and count <= release[value]:
                        kind = AcknowledgeType.RELEASE
                    else:
                        kind = AcknowledgeType.ACCEPT
                    consumer.acknowledge(message, kind)
                    ack = kind.name
                received += 1
                say(
                    event="record",
                    partition=message.partition(),
                    offset=message.offset(),
                    value=value,
                    delivery_count=count,
                    ack=ack,
                )
        if not closing.is_set():
            say(event="holding")
            closing.wait()
    except KafkaException as e:
        say(error=str(e))
        return 1
    finally:
        consumer.close()
    say(event="closed", received=received)
    return 0


if __name__ == "__main__":
    sys.exit(main())
