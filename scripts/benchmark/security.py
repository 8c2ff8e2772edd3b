"""What security costs on one Gregor broker: `scripts/bench security [--size small|full]
[--parts throughput,scram,acls] [--rounds N] [--json FILE]`.

- **throughput**: a broker (a fresh one each round) listens on PLAINTEXT, SSL and
  SASL_SSL (SCRAM-SHA-512); the same clients (confluent-kafka, and the Java client with
  the main table's tuned settings) produce 1 KiB records to a fresh topic through each
  listener and consume them back, the listeners taking turns within each round (rotated
  round by round, so no listener always runs first); the medians over the rounds, each
  listener's ratio to PLAINTEXT, and the broker's CPU seconds per GiB of each phase
  (utime + stime, /proc).
- **scram**: client processes open connection after connection to the SASL_PLAINTEXT and
  the SASL_SSL listener and authenticate each with SCRAM-SHA-512 (ApiVersions,
  SaslHandshake, two SaslAuthenticate; ``auth_load.py``), then close it. Counted at the
  broker: its successful-authentication-total counter over the run, and its CPU time per
  authentication.
- **acls**: ``acl_cost.py``: three brokers side by side, without an authorizer, with it and
  the client's 4 ACLs, with it and 10,000 ACLs; the CPU time of produce and fetch requests
  on each, and of one ``authorize`` call in this process.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties

from . import acl_cost
from .artifacts import ensure_java_driver
from .brokers import GREGOR, Broker
from .drivers import MIB, Client, ConfluentClient, JavaClient, JavaDriver
from .procstats import cpu_seconds
from .scenarios import SIZES, TUNED, Measurements, Sizes, throughput

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
USER, PASSWORD = "bench", "bench-secret"
RECORD = 1024
CLIENTS = ("confluent", "java")
PARTS = ("throughput", "scram", "acls")
# Targets of issue #19: TLS throughput as a fraction of PLAINTEXT's.
PRODUCE_TARGET, CONSUME_TARGET = 0.7, 0.5


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class SecuredBroker:
    """A Gregor broker with a PLAINTEXT, an SSL, a SASL_SSL and a SASL_PLAINTEXT listener
    (SCRAM-SHA-512, one user), certificates from a fresh CA, and the client properties of
    each listener for confluent-kafka and the Java client."""

    def __init__(
        self,
        workdir: Path,
        overrides: dict[str, str] | None = None,
        ca: CertificateAuthority | None = None,
    ) -> None:
        self.ca = ca or CertificateAuthority(workdir / "ca")
        server = self.ca.server("broker")
        listeners = [*LISTENERS, "SASL_PLAINTEXT"]
        config = {
            "listeners": ",".join(f"{name}://127.0.0.1:0" for name in listeners),
            "sasl.enabled.mechanisms": MECHANISM,
            **broker_ssl_properties(server, form="PEM"),
            **(overrides or {}),
        }
        self.broker = Broker(GREGOR, workdir / "broker", overrides=config)

    def __enter__(self) -> SecuredBroker:
        self.broker.__enter__()
        try:
            self._add_user()
        except BaseException:
            self.broker.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.broker.stop()

    def _add_user(self) -> None:
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upsertion = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
        for future in self.broker.admin.alter_user_scram_credentials([upsertion]).values():
            future.result(30)

    def confluent(self, listener: str) -> dict[str, str]:
        config = {"security.protocol": listener}
        if listener.endswith("SSL"):
            config["ssl.ca.location"] = str(self.ca.truststore.pem)
        if listener.startswith("SASL"):
            config |= {"sasl.mechanism": MECHANISM, "sasl.username": USER}
            config["sasl.password"] = PASSWORD
        return config

    def java(self, listener: str) -> dict[str, str]:
        config = {"security.protocol": listener}
        if listener.endswith("SSL"):
            config |= {
                "ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": str(self.ca.truststore.pkcs12),
                "ssl.truststore.password": self.ca.truststore.password,
            }
        if listener.startswith("SASL"):
            config["sasl.mechanism"] = MECHANISM
            config["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{USER}" password="{PASSWORD}";'
            )
        return config


def _clients(secured: SecuredBroker, java: JavaDriver | None) -> dict[str, Callable[[str], Client]]:
    clients: dict[str, Callable[[str], Client]] = {
        "confluent": lambda listener: ConfluentClient(secured.confluent(listener))
    }
    if java is not None:
        clients["java"] = lambda listener: JavaClient(java, TUNED, secured.java(listener))
    return clients


def run_throughput(
    work: Path, sizes: Sizes, rounds: int, java: JavaDriver | None
) -> dict[str, dict[str, Measurements]]:
    """results[client][listener]: the medians over the rounds (and the rounds). Each round
    has a fresh broker, as each scenario of the main table has: one that kept every
    round's logs would slow down as they grew."""
    runs: dict[str, dict[str, list[Measurements]]] = {}
    topics = iter(range(1 << 30))
    ca = CertificateAuthority(work / "ca")
    for round_ in range(rounds):
        with SecuredBroker(work / f"round-{round_}", ca=ca) as secured:
            broker = secured.broker
            clients = _clients(secured, java)
            order = LISTENERS[round_ % 3 :] + LISTENERS[: round_ % 3]
            for client_name, make in clients.items():
                for listener in order:
                    topic = f"bench-{next(topics)}"
                    broker.create_topic(topic, 1)
                    result = throughput(
                        broker.pid,
                        broker.listener_endpoint(listener),
                        topic,
                        make(listener),
                        RECORD,
                        sizes,
                    )
                    shown = ", ".join(
                        f"{k}={result[k]:.4g}"
                        for k in ("produce_mib_s", "consume_mib_s", "cpu_s_per_gib")
                    )
                    _log(f"  round {round_ + 1} {client_name} {listener}: {shown}")
                    runs.setdefault(client_name, {}).setdefault(listener, []).append(result)
    return {
        client: {listener: _median(results) for listener, results in by_listener.items()}
        for client, by_listener in runs.items()
    }


def _median(runs: list[Measurements]) -> dict:
    merged: dict = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    merged["rounds"] = runs
    return merged


def throughput_table(results: dict[str, dict[str, dict]]) -> str:
    lines = [
        "| client | listener | produce MiB/s | ×PLAINTEXT | consume MiB/s | ×PLAINTEXT "
        "| broker CPU s/GiB produce | consume |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for client, by_listener in results.items():
        base = by_listener["PLAINTEXT"]
        for listener, m in by_listener.items():
            lines.append(
                f"| {client} | {listener} | {m['produce_mib_s']:.1f} "
                f"| {m['produce_mib_s'] / base['produce_mib_s']:.2f} "
                f"| {m['consume_mib_s']:.1f} "
                f"| {m['consume_mib_s'] / base['consume_mib_s']:.2f} "
                f"| {m['cpu_s_per_gib_produce']:.2f} | {m['cpu_s_per_gib_consume']:.2f} |"
            )
    return "\n".join(lines)


SCRIPTS = Path(__file__).resolve().parents[1]
_SUCCESSES = re.compile(
    r'^kafka_server_socket_server_metrics_successful_authentication_total\{listener="(\w+)",'
    rf'mechanism="{MECHANISM}"\}} (\S+)$',
    re.MULTILINE,
)


def _successes(broker: Broker, listener: str) -> int:
    """The broker's own count of successful authentications on ``listener``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics") as page:
        text = page.read().decode()
    counts = {name: int(float(value)) for name, value in _SUCCESSES.findall(text)}
    return counts.get(listener, 0)


def run_scram(
    work: Path, seconds: float, processes: int, connections: int
) -> dict[str, dict[str, float]]:
    """Per listener: authentications per second counted by the broker, and its CPU time
    per authentication."""
    results = {}
    metrics = {"metrics.prometheus.port": "0", "metrics.prometheus.host": "127.0.0.1"}
    with SecuredBroker(work, metrics) as secured:
        broker = secured.broker
        for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
            port = broker.listener_endpoint(listener).bootstrap.rpartition(":")[2]
            tls = [str(secured.ca.truststore.pem)] if listener == "SASL_SSL" else []
            command = [sys.executable, "-m", "benchmark.auth_load", port, str(seconds)]
            command += [str(connections), USER, PASSWORD, *tls]
            before, cpu0 = _successes(broker, listener), cpu_seconds(broker.pid)
            clients = [
                subprocess.Popen(command, cwd=SCRIPTS, stdout=subprocess.PIPE)
                for _ in range(processes)
            ]
            outputs = [json.loads(client.communicate()[0]) for client in clients]
            cpu = cpu_seconds(broker.pid) - cpu0
            counted = _successes(broker, listener) - before
            elapsed = max(out["seconds"] for out in outputs)
            results[listener] = {
                "authentications_s": counted / elapsed,
                "broker_cpu_ms_per_authentication": cpu * 1000 / counted,
                "authentications_per_broker_cpu_s": counted / cpu,
                "broker_cpu_share": cpu / elapsed,
                "broker_authentications": counted,
                "client_authentications": sum(out["authentications"] for out in outputs),
                "failures": sum(out["failures"] for out in outputs),
            }
            _log(f"  scram {listener}: {results[listener]}")
    return results


def scram_table(results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"| listener ({MECHANISM}) | authentications/s (broker's count) | broker CPU ms each "
        "| per broker CPU second | broker CPU, share of a core | failures |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for listener, m in results.items():
        lines.append(
            f"| {listener} | {m['authentications_s']:.0f} "
            f"| {m['broker_cpu_ms_per_authentication']:.2f} "
            f"| {m['authentications_per_broker_cpu_s']:.0f} | {m['broker_cpu_share']:.2f} "
            f"| {m['failures']:.0f} |"
        )
    return "\n".join(lines)


# The cheapest workload of each API, whose CPU the handlers' authorization is a share of.
_CHEAPEST = {"produce": "produce 1 x 100 B", "fetch": "fetch 100 B"}


def acl_tables(
    per_request: dict[str, dict[str, Any]],
    calls: dict[str, dict[str, float]],
    handlers: dict[str, float],
) -> str:
    lines = [
        "| workload, one request at a time | broker CPU µs per request: no authorizer "
        f"| authorizer, the client's 4 ACLs | authorizer, {acl_cost.ACLS:,} ACLs "
        f"| {acl_cost.ACLS:,} ACLs / none |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, m in per_request.items():
        lines.append(
            f"| {name} | {m['none_us']:.1f} | {m['own_us']:.1f} | {m['all_us']:.1f} "
            f"| {m['all_us'] / m['none_us']:.3f} |"
        )
    lines += [
        "",
        f"| authorize() in process, {acl_cost.ACLS:,} ACLs | µs, first check | µs, repeated |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {label} | {us['first']:.2f} | {us['repeated']:.2f} |" for label, us in calls.items()
    ]
    lines += [
        "",
        f"| handler's authorization in process, {acl_cost.ACLS:,} ACLs | µs per request "
        "| share of the request's broker CPU (no authorizer) |",
        "|---|---:|---:|",
    ]
    for api, us in handlers.items():
        workload = _CHEAPEST[api]
        share = us / per_request[workload]["none_us"]
        lines.append(f"| {api} (of {workload}) | {us:.2f} | {share:.1%} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench security", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--parts", default=",".join(PARTS), help="of: " + ", ".join(PARTS))
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    parser.add_argument(
        "--clients", default=",".join(CLIENTS), help="throughput clients, of: " + ", ".join(CLIENTS)
    )
    parser.add_argument("--seconds", type=float, default=10, help="of SCRAM load per listener")
    parser.add_argument("--processes", type=int, default=2, help="SCRAM load: client processes")
    parser.add_argument(
        "--connections", type=int, default=16, help="SCRAM load: connections per process"
    )
    parser.add_argument(
        "--requests", type=int, default=10_000, help="ACL cost: requests per workload and round"
    )
    parser.add_argument("--acl-rounds", type=int, default=5, help="ACL cost: rounds")
    parser.add_argument("--json", type=Path, help="also write all measurements here")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    sizes = SIZES[args.size]
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="gregor-bench-security-") as tmp:
        work = Path(tmp)
        if "throughput" in parts:
            java = JavaDriver(ensure_java_driver()) if "java" in args.clients.split(",") else None
            _log(f"throughput: {sizes.throughput_bytes // MIB} MiB of {RECORD} B records per run")
            per_client = run_throughput(work / "throughput", sizes, args.rounds, java)
            results["throughput"] = per_client
            print(throughput_table(per_client))
            print()
        if "scram" in parts:
            _log(f"scram: {args.processes} processes x {args.connections} connections")
            scram = run_scram(work / "scram", args.seconds, args.processes, args.connections)
            results["scram"] = scram
            print(scram_table(scram))
            print()
        if "acls" in parts:
            _log("acls: creating 10,000 ACLs, then alternating requests")
            per_request = acl_cost.request_cpu(work / "acls", args.requests, args.acl_rounds)
            calls = acl_cost.authorize_us()
            handlers = acl_cost.handler_checks_us()
            results["acls"] = {
                "per_request": per_request,
                "authorize_us": calls,
                "handler_us": handlers,
            }
            print(acl_tables(per_request, calls, handlers))
            print()
    if args.json:
        meta = {"size": args.size, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0
