"""What a config belongs to (Kafka's ConfigResource): a topic, a broker (or the cluster-wide
broker default) or a group, and where ZooKeeper-era Kafka keeps each under /config."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

# ConfigResource.Type ids
TOPIC = 2
BROKER = 4
GROUP = 32

# The resource name of the cluster-wide default broker configs.
DEFAULT_BROKER = ""


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: int
    name: str

    @property
    def entity_path(self) -> str:
        """Where Kafka's ZooKeeper layout keeps it, under /config (broker default:
        `brokers/<default>`); groups are Gregor's own, ZooKeeper-era Kafka had none, with
        their ids URL-encoded as Kafka's Sanitizer does client ids (they may hold '/'; dots
        too, since "." and ".." are not znode names)."""
        if self.type == TOPIC:
            return f"topics/{self.name}"
        if self.type == BROKER:
            return f"brokers/{self.name or '<default>'}"
        return f"groups/{quote(self.name, safe='').replace('.', '%2E')}"

    @classmethod
    def from_entity_path(cls, path: str) -> ConfigResource | None:
        kind, _, name = path.partition("/")
        resource_type = {"topics": TOPIC, "brokers": BROKER, "groups": GROUP}.get(kind)
        if resource_type is None or not name:
            return None
        if resource_type == BROKER and name == "<default>":
            name = DEFAULT_BROKER
        elif resource_type == GROUP:
            name = unquote(name)
        return cls(resource_type, name)
