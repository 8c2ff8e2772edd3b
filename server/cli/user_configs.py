"""``gregor configs --entity-type users``: a user's quotas and SCRAM credentials, as
``kafka-configs.sh --bootstrap-server`` manages them.

``--add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'`` salts the password
here (a random salt, RFC 5802's Hi) and sends only the salted password, with
AlterUserScramCredentials; ``--delete-config SCRAM-SHA-512`` deletes that credential. Quota
keys go through AlterClientQuotas; one command may not change both, as kafka-configs.sh
refuses. ``--describe`` prints Kafka's lines: "Quota configs for user-principal 'alice' are
..." and "SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-512=iterations=8192", never a secret. Each credential change is its own request:
Kafka 4.1 refuses a request that changes one user twice (DUPLICATE_RESOURCE), which is what
kafka-configs.sh sends for two mechanisms at once.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from typing import Any

from gregor.controller.scram_alterations import MECHANISM_CODES, MECHANISM_TYPES
from gregor.controller.scram_credentials import MIN_ITERATIONS, salted_password
from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.server.cli.output import print_json
from gregor.server.cli.quotas import USER, alter_quotas, describe_quotas

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
# Kafka's QuotaConfig.isClientOrUserQuotaConfig.
QUOTA_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
# ConfigCommand's form of a credential to add.
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)")
RESOURCE_NOT_FOUND = 91


def describe_scram(client: Client, users: list[str]) -> dict[str, dict[str, int]]:
    """Each user's mechanisms and iterations (every user's when ``users`` is empty); users
    without credentials are left out, as Kafka's admin client leaves them out."""
    cls = schema(DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
    name = schema(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, "UserName")
    answer = client.call(cls(users=tuple(name(name=u) for u in users)))
    _check("", answer.error_code, answer.error_message)
    found = {}
    for result in answer.results:
        if result.error_code.value == RESOURCE_NOT_FOUND:
            continue
        _check(result.user, result.error_code, result.error_message)
        found[result.user] = {
            MECHANISM_TYPES.get(i.mechanism, "UNKNOWN"): int(i.iterations)
            for i in result.credential_infos
        }
    return found


def alter_scram(client: Client, user: str, add: dict[str, str], delete: list[str]) -> None:
    """Delete then add the user's credentials, one request each."""
    cls = schema(ALTER_USER_SCRAM_CREDENTIALS, 0)
    deletion = schema(ALTER_USER_SCRAM_CREDENTIALS, 0, "ScramCredentialDeletion")
    upsertion = schema(ALTER_USER_SCRAM_CREDENTIALS, 0, "ScramCredentialUpsertion")
    requests = [
        cls(deletions=(deletion(name=user, mechanism=MECHANISM_CODES[m]),), upsertions=())
        for m in delete
    ]
    for mechanism, value in add.items():
        iterations, password = _credential(mechanism, value)
        salt = secrets.token_bytes(32)
        salted = salted_password(mechanism, password.encode(), salt, iterations)
        item = upsertion(
            name=user,
            mechanism=MECHANISM_CODES[mechanism],
            iterations=iterations,
            salt=salt,
            salted_password=salted,
        )
        requests.append(cls(deletions=(), upsertions=(item,)))
    for request in requests:
        for result in client.call(request).results:
            _check(result.user, result.error_code, result.error_message)


def _credential(mechanism: str, value: str) -> tuple[int, str]:
    match = _CREDENTIAL.fullmatch(value)
    if match is None:
        raise ClientError(f"Invalid credential property {mechanism}={value.split(',')[0]}...")
    raw, password = match.groups()
    iterations = int(raw) if raw not in (None, "", "-1") else MIN_ITERATIONS
    if iterations < MIN_ITERATIONS:
        raise ClientError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for "
            f"{mechanism}"
        )
    return iterations, password


def _check(user: str, error_code: Any, message: str | None) -> None:
    if error_code.value != 0:
        who = f"user {user!r}: " if user else ""
        detail = f" ({message})" if message else ""
        raise ClientError(f"{who}{error_code.name.upper()}{detail}")


def _alter(client: Client, user: str | None, args: argparse.Namespace) -> None:
    add = dict(args.add_config)
    delete: list[str] = args.delete_config
    unknown_add = [k for k in add if k not in MECHANISM_CODES and k not in QUOTA_KEYS]
    unknown_delete = [k for k in delete if k not in MECHANISM_CODES and k not in QUOTA_KEYS]
    for verb, unknown in (("added", unknown_add), ("deleted", unknown_delete)):
        if unknown:
            raise ClientError(
                f"Only quota and SCRAM credential configs can be {verb} for 'users' using "
                f"--bootstrap-server. Unexpected config names: {', '.join(unknown)}"
            )
    scram_add = {k: v for k, v in add.items() if k in MECHANISM_CODES}
    scram_delete = [k for k in delete if k in MECHANISM_CODES]
    quotas_add = {k: v for k, v in add.items() if k in QUOTA_KEYS}
    quotas_delete = [k for k in delete if k in QUOTA_KEYS]
    if scram_add or scram_delete:
        if user is None:
            raise ClientError(
                "The use of --entity-default or --user-defaults is not allowed with User "
                "SCRAM Credentials using --bootstrap-server."
            )
        if quotas_add or quotas_delete:
            raise ClientError(
                "Cannot alter both quota and SCRAM credential configs simultaneously for "
                "'users' using --bootstrap-server."
            )
        alter_scram(client, user, scram_add, scram_delete)
        return
    try:
        rates = {k: float(v) for k, v in quotas_add.items()}
    except ValueError:
        raise ClientError(f"quotas must be numbers, got {quotas_add}") from None
    alter_quotas(client, {USER: user}, rates, quotas_delete)


def _describe(client: Client, user: str | None, default: bool, as_json: bool) -> None:
    if default or user is not None:
        quotas = describe_quotas(client, {USER: user})
    else:  # every named user's (not the default's, nor a user's with a client id)
        quotas = [(e, v) for e, v in describe_quotas(client, {}) if set(e) == {USER} and e[USER]]
    credentials = {} if default else describe_scram(client, [] if user is None else [user])
    if as_json:
        names = sorted({str(e[USER] or "") for e, _ in quotas} | set(credentials))
        by_name = {str(e[USER] or ""): v for e, v in quotas}
        entities = [
            {
                "entityName": n or None,
                "quotas": by_name.get(n, {}),
                "scramCredentials": credentials.get(n, {}),
            }
            for n in names
        ]
        print_json({"entityType": "users", "entities": entities})
        return
    for entity, values in quotas:
        name = entity[USER]
        who = "the default user-principal" if name is None else _principal(name)
        shown = ", ".join(f"{k}={values[k]!r}" for k in sorted(values))
        print(f"Quota configs for {who} are {shown}")
    for user, mechanisms in credentials.items():
        shown = ", ".join(f"{m}=iterations={n}" for m, n in sorted(mechanisms.items()))
        print(f"SCRAM credential configs for {_principal(user)} are {shown}")


def _principal(name: str) -> str:
    return f"user-principal '{name}'"


def run(args: argparse.Namespace) -> int:
    """``gregor configs --entity-type users``; 1 on an error."""
    user = None if args.entity_default else args.entity_name
    try:
        with Client(args.bootstrap_server, "gregor-configs", config=args.command_config) as client:
            if args.describe:
                _describe(client, user, args.entity_default, args.json)
                return 0
            if user is None and not args.entity_default:
                raise ClientError("--alter needs --entity-name or --entity-default")
            if not args.add_config and not args.delete_config:
                raise ClientError("--alter needs --add-config or --delete-config")
            _alter(client, user, args)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"entityType": "users", "entityName": user, "result": "Altered"})
    elif user is None:
        print("Completed updating default config for users in the cluster.")
    else:
        print(f"Completed updating config for user {user}.")
    return 0
