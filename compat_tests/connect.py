"""A Kafka Connect 4.3 distributed worker (``ConnectDistributed``) run as a real JVM
process against a broker under test, with its REST API on a free local port.

Workers that share a ``group`` form one Connect cluster: its connector configs, source
offsets and statuses live in three compacted topics named after the group.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from compat_tests.broker import REPO_ROOT
from compat_tests.java_client import JAR_DIR, JVM_FLAGS, compiled, jars_classpath
from gregor.server.harness.process import ServerProcess, free_port

CONNECT_JAR_DIR = REPO_ROOT / ".cache" / "connect-jars"
SECURITY_STUB = Path(__file__).resolve().parent / "java" / "connect" / "SecurityHandler.java"
START_TIMEOUT_S = 90.0
REST_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.1
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
"""


class ConnectError(RuntimeError):
    """The worker did not start, stop or answer as expected; the message has its log tail."""


def classpath() -> str:
    """Connect's jars, kafka-clients and the compiled Jetty security stub."""
    jar_cp = os.pathsep.join(
        [
            jars_classpath(CONNECT_JAR_DIR, "connect-runtime-"),
            jars_classpath(JAR_DIR, "kafka-clients-"),
        ]
    )
    return os.pathsep.join([jar_cp, str(compiled(SECURITY_STUB, jar_cp))])


def file_source(path: Path, topic: str) -> dict[str, str]:
    """FileStreamSource: one task, one record per line of ``path``."""
    return {"connector.class": FILE_SOURCE, "file": str(path), "topic": topic, "tasks.max": "1"}


def file_sink(path: Path, topic: str) -> dict[str, str]:
    """FileStreamSink: appends each record of ``topic`` to ``path`` as a line."""
    return {"connector.class": FILE_SINK, "file": str(path), "topics": topic, "tasks.max": "1"}


def client_properties(properties: dict[str, str]) -> dict[str, str]:
    """Worker settings for clients that all connect with ``properties`` (security.protocol,
    sasl.*, ssl.*): the worker's own (group membership, internal topics) take them as they
    are, its connectors' producers, consumers and admins only under the ``producer.``,
    ``consumer.`` and ``admin.`` prefixes."""
    prefixes = ("", "producer.", "consumer.", "admin.")
    return {f"{prefix}{k}": v for prefix in prefixes for k, v in properties.items()}


class ConnectWorker(ServerProcess):
    """One distributed worker with its own port (kept across restarts) and log file."""

    name = "Connect worker"
    error = ConnectError
    cwd = REPO_ROOT
    start_timeout_s = START_TIMEOUT_S

    def __init__(
        self,
        tmp_dir: Path,
        bootstrap: str,
        group: str,
        replication_factor: int,
        overrides: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.tmp_dir = Path(tmp_dir)
        # Chosen now: the REST address names the worker in statuses before it starts.
        self.port = free_port()
        self.log_path = self.tmp_dir / f"connect-{self.port}.log"
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "config.storage.topic": f"{group}-configs",
            "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status",
            "config.storage.replication.factor": str(replication_factor),
            "offset.storage.replication.factor": str(replication_factor),
            "status.storage.replication.factor": str(replication_factor),
            "key.converter": STRING_CONVERTER,
            "value.converter": STRING_CONVERTER,
            # The plugins' service manifests, not a scan of every jar: a faster start.
            "plugin.discovery": "service_load",
            **(overrides or {}),
        }

    @property
    def worker_id(self) -> str:
        """How the REST status names this worker (its advertised host:port)."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, port: int) -> list[str]:
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        properties = self.tmp_dir / f"worker-{port}.properties"
        config = {**self.config, "listeners": f"http://127.0.0.1:{port}"}
        properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        log4j = self.tmp_dir / "connect-log4j2.properties"
        log4j.write_text(LOG4J2)
        return [
            "java",
            *JVM_FLAGS,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath(),
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(properties),
        ]

    def _ready(self) -> bool:
        """Ready when /health says the worker finished startup (joined its group, read
        the config topic) and can take requests."""
        status, _ = self.rest("GET", "/health")
        return status == 200

    def rest(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST call; returns the HTTP status and the decoded JSON body (else the text)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S) as response:
                status, kind, raw = (
                    response.status,
                    response.headers.get_content_type(),
                    response.read(),
                )
        except urllib.error.HTTPError as e:
            status, kind, raw = e.code, e.headers.get_content_type(), e.read()
        # Jetty answers in HTML until Connect's resources are registered.
        return status, json.loads(raw) if kind == "application/json" else raw.decode(
            errors="replace"
        )

    def put_connector(self, name: str, config: dict[str, str]) -> None:
        """Create or update a connector; retries while a rebalance makes the worker answer
        409 (Connect's "try again") or 5xx (the leader not known yet)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            status, body = self.rest("PUT", f"/connectors/{name}/config", config)
            if status in (200, 201):
                return
            if status not in (409, 500, 503) or time.monotonic() > deadline:
                raise ConnectError(self._describe(f"PUT connector {name}: {status} {body}"))
            time.sleep(POLL_INTERVAL_S)

    def status(self, name: str) -> dict[str, Any] | None:
        """The connector's status (connector and tasks, each with state and worker_id);
        None while the worker knows none."""
        status, body = self.rest("GET", f"/connectors/{name}/status")
        if status == 404:
            return None
        if status != 200:
            raise ConnectError(self._describe(f"GET status of {name}: {status} {body}"))
        return body

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's committed offsets as the REST API lists them (KIP-875)."""
        status, body = self.rest("GET", f"/connectors/{name}/offsets")
        if status != 200:
            raise ConnectError(self._describe(f"GET offsets of {name}: {status} {body}"))
        return body["offsets"]


def running_on(status: dict[str, Any] | None) -> list[str] | None:
    """The worker id of each task when the connector and all its tasks run; else None."""
    if status is None or status["connector"]["state"] != "RUNNING" or not status["tasks"]:
        return None
    if any(task["state"] != "RUNNING" for task in status["tasks"]):
        return None
    return [task["worker_id"] for task in status["tasks"]]
