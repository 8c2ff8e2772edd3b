"""A listener's SASL mechanisms, built and checked once at start-up from its settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from gregor.controller.scram_credentials import MECHANISMS as SCRAM_MECHANISMS
from gregor.controller.scram_credentials import ScramCredentialLookup
from gregor.server.security.sasl import oauthbearer, plain, scram
from gregor.server.security.sasl.jaas import LoginModule, parse_server_login_module
from gregor.server.security.sasl.jwks import Jwks
from gregor.server.security.sasl.jwt import JWT_VALIDATORS, JwtSettings, JwtValidator
from gregor.server.security.sasl.mechanism import SaslServer, mechanism_setting
from gregor.server.security.sasl.oauthbearer import (
    OAuthBearerServer,
    TokenValidator,
    UnsecuredValidator,
    UnsecuredValidatorOptions,
)

ENABLED_MECHANISMS = "sasl.enabled.mechanisms"
DEFAULT_ENABLED_MECHANISMS = "GSSAPI"  # Kafka's broker default
JAAS_CONFIG = "sasl.jaas.config"
CALLBACK_HANDLER = "sasl.server.callback.handler.class"
SUPPORTED = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
_LOGIN_MODULES = {
    "PLAIN": plain.LOGIN_MODULE,
    **dict.fromkeys(SCRAM_MECHANISMS, scram.LOGIN_MODULE),
    "OAUTHBEARER": oauthbearer.LOGIN_MODULE,
}
_CALLBACK_HANDLERS = {
    "PLAIN": {plain.CALLBACK_HANDLER},
    **dict.fromkeys(SCRAM_MECHANISMS, {scram.CALLBACK_HANDLER}),
    "OAUTHBEARER": {oauthbearer.UNSECURED_VALIDATOR, *JWT_VALIDATORS},
}


class OAuthBearerFactory:
    """Makes OAUTHBEARER servers; ``jwks`` is the key set the broker must keep refreshed
    (None with the unsecured validator)."""

    def __init__(self, validator: TokenValidator, now_ms: Callable[[], int]) -> None:
        self.validator = validator
        self.jwks = validator.jwks if isinstance(validator, JwtValidator) else None
        self._now_ms = now_ms

    def __call__(self) -> SaslServer:
        return OAuthBearerServer(self.validator, self._now_ms)


def jwks_sources(factories: Mapping[str, Callable[[], SaslServer]]) -> list[Jwks]:
    """The JWKS that a listener's mechanisms read (to refresh off the event loop)."""
    return [f.jwks for f in factories.values() if isinstance(f, OAuthBearerFactory) and f.jwks]


def enabled_mechanisms(settings: Mapping[str, str]) -> list[str]:
    """``sasl.enabled.mechanisms`` (Kafka's default GSSAPI if unset); ValueError naming the
    key for one Gregor does not have."""
    value = settings.get(ENABLED_MECHANISMS, DEFAULT_ENABLED_MECHANISMS)
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise ValueError(f"{ENABLED_MECHANISMS} is empty: a SASL listener needs a mechanism")
    if "GSSAPI" in names:
        unset = "" if ENABLED_MECHANISMS in settings else " (Kafka's default when unset)"
        raise ValueError(
            f"{ENABLED_MECHANISMS} includes GSSAPI{unset}: Kerberos is not supported; "
            f"enable some of {', '.join(SUPPORTED)}"
        )
    for name in names:
        if name not in SUPPORTED:
            raise ValueError(
                f"{ENABLED_MECHANISMS}: unsupported SASL mechanism {name!r}; "
                f"supported: {', '.join(SUPPORTED)}"
            )
    return list(dict.fromkeys(names))


def _login_module(settings: Mapping[str, str], mechanism: str) -> LoginModule | None:
    value = mechanism_setting(settings, mechanism, JAAS_CONFIG)
    if value is None:
        return None
    key = f"{mechanism.lower()}.{JAAS_CONFIG}"
    try:
        module = parse_server_login_module(value)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None
    if module.name != _LOGIN_MODULES[mechanism]:
        raise ValueError(
            f"{key}: login module {module.name} is not supported for {mechanism}; "
            f"use {_LOGIN_MODULES[mechanism]}"
        )
    return module


def _require_login_module(settings: Mapping[str, str], mechanism: str) -> LoginModule:
    module = _login_module(settings, mechanism)
    if module is None:
        # Kafka's JaasContext, which would also look in a JAAS file Gregor does not read.
        raise ValueError(
            f"Could not find a 'KafkaServer' entry in the JAAS configuration for SASL "
            f"mechanism {mechanism}: set listener.name.<listener>.{mechanism.lower()}."
            f"{JAAS_CONFIG}"
        )
    return module


def _callback_handler(settings: Mapping[str, str], mechanism: str) -> str | None:
    value = mechanism_setting(settings, mechanism, CALLBACK_HANDLER)
    name = value.strip() if value else None
    if name and name not in _CALLBACK_HANDLERS[mechanism]:
        raise ValueError(
            f"listener.name.<listener>.{mechanism.lower()}.{CALLBACK_HANDLER}: {name} is not "
            f"supported for {mechanism}; supported: "
            f"{', '.join(sorted(_CALLBACK_HANDLERS[mechanism]))}"
        )
    return name or None


def _oauthbearer(settings: Mapping[str, str], now_ms: Callable[[], int]) -> OAuthBearerFactory:
    module = _require_login_module(settings, "OAUTHBEARER")
    validator: TokenValidator
    if _callback_handler(settings, "OAUTHBEARER") in JWT_VALIDATORS:
        jwt = JwtSettings.from_settings(settings)
        validator = JwtValidator(jwt, Jwks(jwt.jwks_url, jwt.refresh_ms), now_ms)
    else:
        options = UnsecuredValidatorOptions.from_jaas(module.options)
        validator = UnsecuredValidator(options, now_ms)
    return OAuthBearerFactory(validator, now_ms)


def server_mechanisms(
    settings: Mapping[str, str],
    credentials: ScramCredentialLookup,
    now_ms: Callable[[], int],
) -> dict[str, Callable[[], SaslServer]]:
    """A factory of servers per enabled mechanism of one listener. ``settings`` are the
    listener's resolved keys; a mechanism's own keys may keep Kafka's mechanism prefix
    (``plain.sasl.jaas.config``). ValueError, naming the key, for what Kafka would refuse
    at start-up or Gregor cannot run."""
    factories: dict[str, Callable[[], SaslServer]] = {}
    for mechanism in enabled_mechanisms(settings):
        _callback_handler(settings, mechanism)
        if mechanism == "PLAIN":
            users = plain.plain_users(_require_login_module(settings, mechanism))
            factories[mechanism] = partial(plain.PlainServer, users)
        elif mechanism in SCRAM_MECHANISMS:
            _login_module(settings, mechanism)  # optional, but checked when given
            factories[mechanism] = partial(scram.ScramServer, mechanism, credentials)
        else:
            factories[mechanism] = _oauthbearer(settings, now_ms)
    return factories
