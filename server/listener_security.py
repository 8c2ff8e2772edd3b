"""The security of each listener, as Kafka's ChannelBuilders set it up: its protocol, the
TLS context of an SSL or SASL_SSL listener, the SASL mechanisms of a SASL_PLAINTEXT or
SASL_SSL one (``server/security/authenticator.py`` runs their exchange on each connection)
and how a connection's principal is found.

Each TLS listener's context is built at start-up from the listener's settings
(``listener.name.<listener>.<key>`` over ``<key>``), so a bad keystore stops start-up with
its key named. Certificates are swapped without a restart when their files change
(``reload_changed``, polled by the broker) and on AlterConfigs of a listener's ``ssl.*``
keys (``check`` before the change is stored, ``apply`` once it is: Kafka's dynamic
keystore update)."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.configdef import ConfigError
from gregor.controller.scram_credentials import ScramCredentialLookup
from gregor.server.config import (
    KEYS,
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    BrokerConfig,
    listener_settings,
)
from gregor.server.metrics import AuthenticationMetrics
from gregor.server.security.authenticator import SaslListener
from gregor.server.security.sasl.mechanism import mechanism_setting
from gregor.server.security.sasl.mechanisms import server_mechanisms
from gregor.server.security.ssl_principal import (
    SslPrincipalMapper,
    parse_mapping_rules,
    principal_from_ssl,
)
from gregor.server.security.tls import ServerTls, SslConfigError

logger = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"


def _ssl_keys(settings: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in settings.items() if k.startswith("ssl.")}


@dataclass(slots=True)
class ListenerSecurity:
    """One listener: ``tls`` is set on a TLS listener only, ``mapper`` on an SSL one (on
    SASL_SSL the principal is SASL's), ``sasl`` on a SASL one."""

    name: str
    protocol: str
    tls: ServerTls | None = None
    mapper: SslPrincipalMapper | None = None
    ssl_settings: dict[str, str] | None = None  # the ssl.* keys ``tls`` was built from
    sasl: SaslListener | None = None
    metrics: AuthenticationMetrics | None = None  # where TLS handshake times go

    def handshake_done(self, elapsed_ns: int) -> None:
        """A TLS handshake on this listener succeeded after ``elapsed_ns``."""
        if self.metrics is not None:
            self.metrics.tls_handshake(self.name, elapsed_ns)

    def principal(self, transport: asyncio.BaseTransport) -> str:
        """The principal of a connection on this listener, once its TLS handshake is done:
        the client certificate's mapped name on SSL, else User:ANONYMOUS (until SASL
        authenticates the connection)."""
        if self.mapper is None:
            return ANONYMOUS
        return principal_from_ssl(transport.get_extra_info("ssl_object"), self.mapper)


def listener_securities(
    config: BrokerConfig,
    credentials: ScramCredentialLookup,
    now_ms: Callable[[], int],
    metrics: AuthenticationMetrics,
) -> dict[str, ListenerSecurity]:
    """Every listener's security by name; ConfigError (naming the key and the listener)
    if a TLS listener's settings do not make a context or a SASL listener's do not make
    its mechanisms. SCRAM authenticates against ``credentials``."""
    protocols = config.security_protocols
    securities = {}
    for name in config.listener_names:
        protocol = protocols[name]
        security = ListenerSecurity(name, protocol)
        settings = listener_settings(config.raw, name)
        if protocol in TLS_PROTOCOLS:
            try:
                security.tls = ServerTls(settings)
                if protocol == "SSL":
                    security.mapper = parse_mapping_rules(
                        settings.get("ssl.principal.mapping.rules", "DEFAULT")
                    )
            except ValueError as e:  # SslConfigError, or the mapping rules' error
                raise ConfigError(f"{e} (listener {name})") from None
            security.ssl_settings = _ssl_keys(settings)
            security.metrics = metrics
        if protocol in SASL_PROTOCOLS:
            security.sasl = _sasl_listener(name, settings, credentials, now_ms, metrics)
        securities[name] = security
    if config.cluster_mode:
        _check_inter_broker_mechanism(config, securities)
    return securities


def _setting(settings: Mapping[str, str], key: str, listener: str) -> int:
    """A SASL listener's numeric key, parsed (Kafka's default when unset)."""
    text = settings.get(key, KEYS[key].default)
    value: int = KEYS[key].parse(text, f"listener.name.{listener.lower()}.{key}")
    return value


def _sasl_listener(
    name: str,
    settings: Mapping[str, str],
    credentials: ScramCredentialLookup,
    now_ms: Callable[[], int],
    metrics: AuthenticationMetrics,
) -> SaslListener:
    try:
        factories = server_mechanisms(settings, credentials, now_ms)
    except ValueError as e:
        raise ConfigError(f"{e} (listener {name})") from None
    reauth_ms = {}
    for mechanism in factories:
        key = "connections.max.reauth.ms"
        text = mechanism_setting(settings, mechanism, key) or KEYS[key].default
        reauth_ms[mechanism] = KEYS[key].parse(text, key)
    return SaslListener(
        name,
        factories,
        max_receive_size=_setting(settings, "sasl.server.max.receive.size", name),
        reauth_ms=reauth_ms,
        failed_delay_ms=_setting(settings, "connection.failed.authentication.delay.ms", name),
        metrics=metrics,
    )


def _check_inter_broker_mechanism(
    config: BrokerConfig, securities: Mapping[str, ListenerSecurity]
) -> None:
    """Kafka's rule: brokers that talk SASL to each other use a mechanism the inter-broker
    listener enables."""
    security = securities.get(config.inter_broker_listener)
    if security is None or security.sasl is None:
        return
    settings = listener_settings(config.raw, security.name)
    mechanism = settings.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip()
    if mechanism not in security.sasl.factories:
        raise ConfigError(
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms "
            f"when SASL is used for inter-broker communication (listener {security.name} "
            f"enables {', '.join(security.sasl.factories)}, not {mechanism})"
        )


def reload_changed(securities: Mapping[str, ListenerSecurity]) -> None:
    """Swap in the certificates of every TLS listener whose keystore or truststore files
    changed (a stat each; a bad new file keeps the old context, logged by ServerTls)."""
    for security in securities.values():
        if security.tls is not None and security.tls.maybe_reload():
            logger.info("Reloaded the keystore and truststore of listener %s", security.name)


def _changed(
    securities: Mapping[str, ListenerSecurity], props: Mapping[str, str]
) -> list[tuple[ListenerSecurity, ServerTls, dict[str, str]]]:
    """The TLS listeners whose ssl.* settings differ in ``props``, with their new settings."""
    changed = []
    for security in securities.values():
        if security.tls is None:
            continue
        settings = listener_settings(props, security.name)
        if _ssl_keys(settings) != security.ssl_settings:
            changed.append((security, security.tls, settings))
    return changed


def check(securities: Mapping[str, ListenerSecurity], props: Mapping[str, str]) -> None:
    """Would the broker's properties ``props`` make a context for every TLS listener whose
    settings they change? SslConfigError (its message naming the key and listener) if not."""
    for security, tls, settings in _changed(securities, props):
        try:
            # An update of a copy checks what the real one will (the stores load, the
            # certificate keeps its DN and SubjectAltNames) and swaps nothing.
            copy.copy(tls).update(settings)
        except SslConfigError as e:
            raise SslConfigError(f"{e} (listener {security.name})") from None


def apply(securities: Mapping[str, ListenerSecurity], props: Mapping[str, str]) -> None:
    """New connections of each TLS listener whose settings ``props`` change use them (those
    connected keep theirs); a change that no longer validates is logged and not applied."""
    for security, tls, settings in _changed(securities, props):
        try:
            tls.update(settings)
        except SslConfigError as e:
            logger.error("Keeping the TLS settings of listener %s: %s", security.name, e)
            continue
        security.ssl_settings = _ssl_keys(settings)
        logger.info("Listener %s uses its new TLS settings", security.name)
