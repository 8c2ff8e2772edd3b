"""What an AlterUserScramCredentials request asks, checked as Kafka 4.1's ScramControlManager
checks it, and how one user's change applies to the configs that hold their credentials.

A request may change each user once (a second deletion or upsertion of the same user, of
any mechanism, is DUPLICATE_RESOURCE for that user); an empty name is UNACCEPTABLE_CREDENTIAL,
an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384
UNACCEPTABLE_CREDENTIAL. Deleting a credential the user does not have is RESOURCE_NOT_FOUND,
found by the controller against what it stores (``apply``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from gregor.controller.scram_credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
)
from gregor.wire.errors import KafkaError

# Kafka's org.apache.kafka.clients.admin.ScramMechanism: the wire's int8 for each mechanism.
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_CODES = {name: code for code, name in MECHANISM_TYPES.items()}


@dataclass(frozen=True)
class Upsertion:
    """One ScramCredentialUpsertion as the request carries it."""

    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class Alteration:
    """A user's one change: the mechanism's new credential, or None to delete it."""

    mechanism: str
    credential: ScramCredential | None


def _duplicate() -> KafkaError:
    message = "A user credential cannot be altered twice in the same request"
    return KafkaError(ErrorCode.duplicate_resource, message)


def _name_and_mechanism(user: str, mechanism: int) -> KafkaError | None:
    if not user:
        return KafkaError(ErrorCode.unacceptable_credential, "Username must not be empty")
    if mechanism not in MECHANISM_TYPES:
        return KafkaError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return None


def _upsertion_error(upsertion: Upsertion) -> KafkaError | None:
    error = _name_and_mechanism(upsertion.user, upsertion.mechanism)
    if error is None and upsertion.iterations < MIN_ITERATIONS:
        error = KafkaError(ErrorCode.unacceptable_credential, "Too few iterations")
    if error is None and upsertion.iterations > MAX_ITERATIONS:
        error = KafkaError(ErrorCode.unacceptable_credential, "Too many iterations")
    return error


def alterations(
    deletions: Iterable[tuple[str, int]], upsertions: Iterable[Upsertion]
) -> tuple[dict[str, Alteration], dict[str, KafkaError]]:
    """The request's valid changes by user, and the users refused with why (deletions are
    looked at first, then upsertions, as Kafka does)."""
    valid: dict[str, Alteration] = {}
    errors: dict[str, KafkaError] = {}
    for user, mechanism in deletions:
        if user in errors:
            continue
        if valid.pop(user, None) is not None:
            errors[user] = _duplicate()
        elif (error := _name_and_mechanism(user, mechanism)) is not None:
            errors[user] = error
        else:
            valid[user] = Alteration(MECHANISM_TYPES[mechanism], None)
    for upsertion in upsertions:
        user = upsertion.user
        if user in errors:
            continue
        if valid.pop(user, None) is not None:
            errors[user] = _duplicate()
        elif (error := _upsertion_error(upsertion)) is not None:
            errors[user] = error
        else:
            name = MECHANISM_TYPES[upsertion.mechanism]
            credential = credential_from_salted_password(
                name, upsertion.salt, upsertion.salted_password, upsertion.iterations
            )
            valid[user] = Alteration(name, credential)
    return valid, errors


def apply(configs: Mapping[str, str], alteration: Alteration) -> dict[str, str]:
    """``configs`` (a user's, holding their credentials by mechanism name beside any other
    keys) with the change made; KafkaError(RESOURCE_NOT_FOUND) for the deletion of a
    credential the user does not have."""
    out = dict(configs)
    if alteration.credential is not None:
        out[alteration.mechanism] = alteration.credential.to_config()
    elif out.pop(alteration.mechanism, None) is None:
        raise KafkaError(
            ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        )
    return out
