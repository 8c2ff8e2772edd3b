"""Topic names every floor from the metadata cache up agrees on: the internal topics, and the
unified form under which two names collide ('.' and '_' clash in metric names)."""

from __future__ import annotations

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")
