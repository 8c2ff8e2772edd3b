"""How each client of the compatibility matrix connects to a secured listener, in its own
configuration style: one ``Login`` (protocol, TLS trust and identity, SASL mechanism and
user) made into Java's properties, librdkafka's properties (confluent-kafka and kcat),
kafka-python's and aiokafka's keyword arguments; and each client's consumer reading back
what a test produced. Used by the TLS, SASL and ACL tests."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer
from kafka import KafkaConsumer
from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaPythonTokenProvider

from gregor.server.harness.certs import Identity, Truststore, client_ssl_properties

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Login:
    """A client's security: ``protocol`` (SSL, SASL_PLAINTEXT, SASL_SSL); over TLS, the CA it
    trusts and the certificate it presents (mutual TLS); over SASL, the mechanism and the
    user (OAUTHBEARER: Kafka's unsecured token for that principal, no password)."""

    protocol: str
    truststore: Truststore | None = None
    identity: Identity | None = None
    mechanism: str | None = None
    user: str = ""
    password: str = ""


def unsecured_token(principal: str) -> str:
    """Kafka's unsecured JWT (alg none), as OAuthBearerUnsecuredLoginCallbackHandler makes."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time()) - 1  # whole seconds, never ahead of the broker's clock
    claims = {"sub": principal, "iat": now, "exp": now + 3600}
    return f"{part({'alg': 'none'})}.{part(claims)}."


def java(login: Login) -> dict[str, str]:
    """kafka-clients: a JAAS line per mechanism, PKCS12 truststore and keystore."""
    configs = {"security.protocol": login.protocol}
    if login.truststore is not None:
        configs |= client_ssl_properties(login.truststore, login.identity)
    if login.mechanism is not None:
        configs |= {"sasl.mechanism": login.mechanism, "sasl.jaas.config": _jaas(login)}
    return configs


def _jaas(login: Login) -> str:
    if login.mechanism == "OAUTHBEARER":
        return f'{OAUTH_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="{login.user}";'
    module = _LOGIN_MODULES[login.mechanism or ""]
    return f'{module} required username="{login.user}" password="{login.password}";'


def librdkafka(login: Login) -> dict[str, str]:
    """confluent-kafka and kcat (``-X``): PEM files by location, sasl.username/password."""
    conf = {"security.protocol": login.protocol}
    if login.truststore is not None:
        conf["ssl.ca.location"] = str(login.truststore.pem)
    if login.identity is not None:
        conf["ssl.certificate.location"] = str(login.identity.cert)
        conf["ssl.key.location"] = str(login.identity.key)
        assert login.identity.key_password is not None
        conf["ssl.key.password"] = login.identity.key_password
    if login.mechanism is None:
        return conf
    conf["sasl.mechanism"] = login.mechanism
    if login.mechanism == "OAUTHBEARER":
        conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        conf["sasl.oauthbearer.config"] = f"principal={login.user}"
    else:
        conf["sasl.username"], conf["sasl.password"] = login.user, login.password
    return conf


def kcat_options(login: Login) -> list[str]:
    return [a for k, v in librdkafka(login).items() for a in ("-X", f"{k}={v}")]


class _KafkaPythonToken(KafkaPythonTokenProvider):
    def __init__(self, principal: str) -> None:
        self.principal = principal

    def token(self) -> str:
        return unsecured_token(self.principal)


def kafka_python(login: Login) -> dict[str, Any]:
    """kafka-python: ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password, sasl_* keywords."""
    options: dict[str, Any] = {"security_protocol": login.protocol}
    if login.truststore is not None:
        options["ssl_cafile"] = str(login.truststore.pem)
    if login.identity is not None:
        options |= {
            "ssl_certfile": str(login.identity.cert),
            "ssl_keyfile": str(login.identity.key),
            "ssl_password": login.identity.key_password,
        }
    return options | _python_sasl(login, _KafkaPythonToken)


class _AioToken(AbstractTokenProvider):
    def __init__(self, principal: str) -> None:
        self.principal = principal

    async def token(self) -> str:
        return unsecured_token(self.principal)


def aiokafka(login: Login) -> dict[str, Any]:
    """aiokafka: an SSLContext made by its create_ssl_context helper, sasl_* keywords."""
    options: dict[str, Any] = {"security_protocol": login.protocol}
    if login.truststore is not None:
        identity = login.identity
        options["ssl_context"] = create_ssl_context(
            cafile=str(login.truststore.pem),
            certfile=None if identity is None else str(identity.cert),
            keyfile=None if identity is None else str(identity.key),
            password=None if identity is None else identity.key_password,
        )
    return options | _python_sasl(login, _AioToken)


def _python_sasl(login: Login, token: type[_KafkaPythonToken | _AioToken]) -> dict[str, Any]:
    """kafka-python's and aiokafka's SASL keywords (the same names in both)."""
    if login.mechanism is None:
        return {}
    options: dict[str, Any] = {"sasl_mechanism": login.mechanism}
    if login.mechanism == "OAUTHBEARER":
        options["sasl_oauth_token_provider"] = token(login.user)
    else:
        options["sasl_plain_username"] = login.user
        options["sasl_plain_password"] = login.password
    return options


# -- consuming back what a test produced, in each client's way ----------------------------


def confluent_consume(conf: dict[str, Any], topic: str, count: int, **extra: Any) -> list[bytes]:
    """A group consumer (group ``topic``) from the earliest offset, ``count`` values."""
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest", **extra})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
    finally:
        consumer.close()
    return got


def kafka_python_consume(
    options: dict[str, Any], topic: str, count: int, **extra: Any
) -> list[bytes]:
    """From the earliest offset, ``count`` values (``extra``: group_id, isolation_level...)."""
    consumer = KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(TIMEOUT_S * 1000),
        **options,
        **extra,
    )
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == count:
            break
    consumer.close()
    return got


async def aiokafka_consume(
    options: dict[str, Any], topic: str, count: int, **extra: Any
) -> list[bytes]:
    """From the earliest offset, ``count`` values (``extra``: group_id, isolation_level...)."""
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options, **extra)
    got: list[bytes] = []
    try:
        await consumer.start()
        async with asyncio.timeout(TIMEOUT_S):
            async for message in consumer:
                assert message.value is not None
                got.append(message.value)
                if len(got) == count:
                    break
    finally:
        await consumer.stop()
    return got
