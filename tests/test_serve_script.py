"""``scripts/serve``, the README's first command: it listens and advertises where the caller
says, and a server.properties file given to it is used as written (nothing replaced)."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gregor.wire.versions import METADATA
from tests.kafka_wire import WireClient
from tests.test_internal_topics import req

SERVE = Path(__file__).resolve().parent.parent / "scripts" / "serve"
_LISTENING = re.compile(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")


@contextmanager
def serve(*args: str) -> Iterator[int]:
    """Run scripts/serve with ``args``; yield the port its broker listens on."""
    proc = subprocess.Popen(
        [str(SERVE), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        port = None
        for line in proc.stdout:
            found = _LISTENING.search(line)
            if found:
                port = int(found.group(1))
                break
            assert time.monotonic() < deadline, "the broker did not start"
        assert port is not None, "scripts/serve exited before listening"
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def advertised(port: int) -> list[tuple[str, int]]:
    client = WireClient(port)
    answer = client.call(
        METADATA,
        12,
        req(
            METADATA,
            12,
            topics=(),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    client.close()
    return [(b.host, b.port) for b in answer.brokers]


def test_an_overridden_listener_is_the_advertised_one(tmp_path: Path) -> None:
    overrides = ("--override", "listeners=PLAINTEXT://127.0.0.1:0")
    with serve(*overrides, "--override", f"log.dirs={tmp_path / 'data'}") as port:
        assert port != 9092
        assert advertised(port) == [("127.0.0.1", port)]
    assert (tmp_path / "data" / "meta.properties").is_file()


def test_a_properties_file_is_used_as_written(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'file-data'}\nbroker.id=7\n"
    )
    with serve(str(properties)) as port:
        assert advertised(port) == [("127.0.0.1", port)]
    assert "node.id=7" in (tmp_path / "file-data" / "meta.properties").read_text()


def test_a_missing_properties_file_is_one_line(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(SERVE), str(tmp_path / "no-such.properties")], capture_output=True, text=True
    )
    assert run.returncode == 1
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and "Fatal error during startup: cannot read" in lines[0], lines


def test_a_malformed_properties_file_is_one_line(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("log.dirs=\\u12\n")  # Java's Properties.load refuses it too
    run = subprocess.run([str(SERVE), str(properties)], capture_output=True, text=True)
    assert run.returncode == 1
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and "Malformed \\uxxxx encoding" in lines[0], lines
