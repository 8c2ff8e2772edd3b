"""What CreateAcls and DeleteAcls change, worked out alike by both controllers: the new ACL set
of each resource pattern touched, and the bindings each deletion filter removed.

Kafka 4.1's semantics (AclControlManager): creating an ACL that exists already succeeds and
changes nothing; each filter answers every binding it matches, even one that an earlier
filter of the same request matched too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from gregor.controller.acls.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

Entries = frozenset[AccessControlEntry]


def grouped(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, Entries]:
    """The bindings' ACLs by resource pattern."""
    by_pattern: defaultdict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    for binding in bindings:
        by_pattern[binding.pattern].add(binding.entry)
    return {pattern: frozenset(entries) for pattern, entries in by_pattern.items()}


def _exact(flt: ResourcePatternFilter) -> ResourcePattern | None:
    """The one pattern a filter can match, if it names one (Kafka's matchesAtMostOne)."""
    concrete = flt.resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN)
    specific = flt.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
    if concrete and specific and flt.name is not None:
        return ResourcePattern(flt.resource_type, flt.name, flt.pattern_type)
    return None


def candidates(
    known: Iterable[ResourcePattern], filters: Sequence[AclBindingFilter]
) -> list[ResourcePattern]:
    """The patterns the filters may delete from: the known ones a filter's pattern matches,
    and each pattern a filter names exactly (another broker may have just given it ACLs)."""
    found = {p for p in known if any(f.pattern.matches(p) for f in filters)}
    found.update(p for f in filters if (p := _exact(f.pattern)) is not None)
    return sorted(found, key=str)


def delete(
    pattern: ResourcePattern, current: Entries, filters: Sequence[AclBindingFilter]
) -> tuple[Entries, list[list[AclBinding]]]:
    """What is left of ``pattern``'s ACLs after the filters, and the bindings each filter
    deleted from it."""
    deleted: list[list[AclBinding]] = []
    gone: set[AccessControlEntry] = set()
    for flt in filters:
        matched = []
        if flt.pattern.matches(pattern):
            matched = [e for e in current if flt.entry.matches(e)]
        gone.update(matched)
        deleted.append([AclBinding(pattern, e) for e in matched])
    return current - gone, deleted
