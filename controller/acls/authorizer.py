"""Gregor's authorizer, with the semantics of Kafka's AclAuthorizer and StandardAuthorizer.

A request is allowed when the principal is a super user, or when no DENY and at least one
ALLOW among the ACLs that apply to the resource matches; ACLs apply to a resource by its
literal name, the literal wildcard "*" or a prefix of its name, and an ACL matches when its
principal is the request's or "User:*", its host the client's or "*", and its operation the
requested one or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also grants DESCRIBE and one of
ALTER_CONFIGS also DESCRIBE_CONFIGS. When no ACL at all applies to the resource (whatever its
principal), ``allow.everyone.if.no.acl.found`` decides.

The index keeps each resource pattern's ACLs grouped by principal, literal names in a dict per
resource type and prefixes in a dict per resource type probed at each prefix length present,
so one check costs a few dict lookups whatever the number of ACLs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping

from gregor.configdef import invalid
from gregor.controller.acls.model import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
)

# authorizer.class.name values that select this authorizer: Kafka's ZooKeeper-mode and KRaft
# authorizers, whose semantics it has.
AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)

# One pattern's ACLs by principal: (host, operation, permission) for each.
_Group = dict[str, tuple[tuple[str, AclOperation, AclPermissionType], ...]]

_ALL = AclOperation.ALL
_DENY = AclPermissionType.DENY
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}
_NOTHING: frozenset[AclOperation] = frozenset()
# Past this many remembered decisions the memory starts over (a client naming ever new
# resources must not grow it without bound).
_DECISIONS_MAX = 1 << 16
_SPECIFIC = (PatternType.LITERAL, PatternType.PREFIXED)


def _group(entries: Iterable[AccessControlEntry]) -> _Group:
    by_principal: defaultdict[str, list[tuple[str, AclOperation, AclPermissionType]]]
    by_principal = defaultdict(list)
    for e in entries:
        acl = (e.host, AclOperation(e.operation), AclPermissionType(e.permission))
        by_principal[e.principal].append(acl)
    return {principal: tuple(acls) for principal, acls in by_principal.items()}


class _Index:
    """Every binding, by pattern, and the lookup structures ``authorize`` reads."""

    def __init__(self) -> None:
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self.literal: dict[ResourceType, dict[str, _Group]] = {}
        self.prefixed: dict[ResourceType, dict[str, _Group]] = {}
        self.prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._length_counts: dict[ResourceType, Counter[int]] = defaultdict(Counter)

    def set(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        rtype, name = pattern.resource_type, pattern.name
        prefixed = pattern.pattern_type == PatternType.PREFIXED
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"ACLs need a LITERAL or PREFIXED pattern, not {pattern}")
        table = (self.prefixed if prefixed else self.literal).setdefault(rtype, {})
        existed = pattern in self.acls
        if entries:
            self.acls[pattern] = entries
            table[name] = _group(entries)
        elif existed:
            del self.acls[pattern]
            del table[name]
        if prefixed and existed != bool(entries):
            counts = self._length_counts[rtype]
            counts[len(name)] += 1 if entries else -1
            self.prefix_lengths[rtype] = tuple(sorted(n for n, c in counts.items() if c > 0))

    def groups(self, resource_type: ResourceType, name: str) -> list[_Group]:
        """The ACL groups that apply to the resource: literal, wildcard, each prefix."""
        found = []
        literal = self.literal.get(resource_type)
        if literal:
            if (group := literal.get(name)) is not None:
                found.append(group)
            if (group := literal.get(WILDCARD)) is not None:
                found.append(group)
        prefixed = self.prefixed.get(resource_type)
        if prefixed:
            size = len(name)
            for length in self.prefix_lengths[resource_type]:
                if length > size:
                    break
                if (group := prefixed.get(name[:length])) is not None:
                    found.append(group)
        return found


def _decide(groups: list[_Group], principal: str, host: str, operation: AclOperation) -> bool:
    implying = _IMPLIED_BY.get(operation, _NOTHING)
    allowed = False
    for group in groups:
        for who in (principal, WILDCARD_PRINCIPAL):
            for acl_host, op, permission in group.get(who, ()):
                if acl_host != host and acl_host != WILDCARD:
                    continue
                if permission == _DENY:
                    # Implication is for ALLOW only: DENY READ does not deny DESCRIBE.
                    if op == operation or op == _ALL:
                        return False
                elif op == operation or op == _ALL or op in implying:
                    allowed = True
    return allowed


class AclAuthorizer:
    def __init__(self, super_users: Collection[str], allow_everyone_if_no_acl_found: bool) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._index = _Index()
        # authorize()'s answers by (principal, host, operation, resource type, name): a
        # client asks the same few on every request. Forgotten whenever an ACL changes.
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        # What authorize() answered: Kafka's authorizer-metrics (server/metrics.py).
        self.allowed = 0
        self.denied = 0

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> AclAuthorizer:
        """``super.users`` ("User:a;User:b", each checked as Kafka parses principals) and
        ``allow.everyone.if.no.acl.found`` (Java's Boolean.parseBoolean: "true" in any case)."""
        users = (u.strip() for u in settings.get("super.users", "").split(";"))
        allow = settings.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true"
        return cls([parse_principal(u) for u in users if u], allow)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        key = (principal, host, operation, resource_type, name)
        allowed = self._decisions.get(key)
        if allowed is None:
            if principal in self.super_users:
                allowed = True
            elif groups := self._index.groups(resource_type, name):
                allowed = _decide(groups, principal, host, operation)
            else:
                allowed = self.allow_everyone_if_no_acl_found
            if len(self._decisions) >= _DECISIONS_MAX:
                self._decisions.clear()
            self._decisions[key] = allowed
        if allowed:
            self.allowed += 1
        else:
            self.denied += 1
        return allowed

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str, supported: int
    ) -> int:
        """KIP-430: the bits of ``supported`` whose operation ``authorize`` allows."""
        if principal in self.super_users:
            return supported
        groups = self._index.groups(resource_type, name)
        if not groups:
            return supported if self.allow_everyone_if_no_acl_found else 0
        bits = 0
        for op in AclOperation:
            if supported >> op & 1 and _decide(groups, principal, host, op):
                bits |= 1 << op
        return bits

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """KIP-679 (Kafka's Authorizer.authorizeByResourceType, which StandardAuthorizer
        uses): may the principal do ``operation`` on at least one resource of the type? An
        ALLOW counts unless a DENY covers it: a DENY of the same literal name, or a DENY
        prefix of its name; a DENY of the literal wildcard refuses everything. Operations
        match exactly or by ALL, without implication."""
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN) or resource_type in (
            ResourceType.ANY,
            ResourceType.UNKNOWN,
        ):
            raise ValueError(
                "Must specify a non-filter operation type and resource type, "
                f"got {operation.name} and {resource_type.name}"
            )
        # Kafka first checks a made-up name, so super users (and allow-everyone when no ACL
        # applies to that name) are allowed whatever the DENY ACLs.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny: dict[PatternType, set[str]] = {t: set() for t in _SPECIFIC}
        allow: dict[PatternType, set[str]] = {t: set() for t in _SPECIFIC}
        wildcard_allowed = False
        index = self._index
        for pattern_type, table in (
            (PatternType.LITERAL, index.literal.get(resource_type, {})),
            (PatternType.PREFIXED, index.prefixed.get(resource_type, {})),
        ):
            for name, group in table.items():
                for who in (principal, WILDCARD_PRINCIPAL):
                    for acl_host, op, permission in group.get(who, ()):
                        if acl_host not in (host, WILDCARD) or op not in (operation, _ALL):
                            continue
                        wildcard = pattern_type == PatternType.LITERAL and name == WILDCARD
                        if permission == _DENY:
                            if wildcard:
                                return False
                            deny[pattern_type].add(name)
                        elif permission == AclPermissionType.ALLOW:
                            wildcard_allowed |= wildcard
                            if not wildcard:
                                allow[pattern_type].add(name)
        if wildcard_allowed:
            return True
        denied_prefixes = deny[PatternType.PREFIXED]
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:n] in denied_prefixes for n in range(1, len(name) + 1)):
                    return True
        return False

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for pattern, entries in _by_pattern(bindings).items():
            self.set_acls(pattern, self.acls(pattern) | entries)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for pattern, entries in _by_pattern(bindings).items():
            self.set_acls(pattern, self.acls(pattern) - entries)

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Make ``entries`` the whole ACL set of ``pattern`` (none: the pattern goes): what a
        ZooKeeper change notification or a metadata-log change carries per resource."""
        self._index.set(pattern, frozenset(entries))
        self._decisions = {}

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        """Swap in a whole new set of bindings (a load, a snapshot) in one assignment."""
        index = _Index()
        for pattern, entries in _by_pattern(bindings).items():
            index.set(pattern, frozenset(entries))
        self._index = index
        self._decisions = {}

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        """The ACLs of exactly this pattern."""
        return self._index.acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        """Every pattern that has ACLs."""
        return list(self._index.acls)

    def bindings(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [
            AclBinding(pattern, entry)
            for pattern, entries in self._index.acls.items()
            if flt.pattern.matches(pattern)
            for entry in entries
            if flt.entry.matches(entry)
        ]

    def count(self) -> int:
        """The number of ACLs (Kafka's aclCount, for the metric)."""
        return sum(len(entries) for entries in self._index.acls.values())


def _by_pattern(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, set[AccessControlEntry]]:
    grouped: defaultdict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    for binding in bindings:
        grouped[binding.pattern].add(binding.entry)
    return grouped


def check_authorizer_class(name: str, value: str) -> None:
    """The config validator of ``authorizer.class.name`` (empty: no authorizer)."""
    if value and value not in AUTHORIZER_CLASSES:
        raise invalid(
            name,
            value,
            f"Gregor's authorizer is {' or '.join(AUTHORIZER_CLASSES)}; other authorizers "
            "are not supported",
        )


def check_super_users(name: str, value: str) -> None:
    """The config validator of ``super.users``: each principal as Kafka parses it."""
    try:
        AclAuthorizer.from_settings({"super.users": value})
    except ValueError as e:
        raise invalid(name, value, str(e)) from None


def configured_authorizer(settings: Mapping[str, str]) -> AclAuthorizer | None:
    """The authorizer the broker's ``authorizer.class.name`` selects, or None."""
    name = settings.get("authorizer.class.name", "").strip()
    if not name:
        return None
    check_authorizer_class("authorizer.class.name", name)
    return AclAuthorizer.from_settings(settings)
