"""The partition log: segments, indexes, recovery, retention, producer state, checkpoints."""

from gregor.log.config import TOPIC_CONFIGS, LogConfig, validate_topic_configs
from gregor.log.log import AppendResult, Log, ReadResult
from gregor.log.manager import LogManager

__all__ = [
    "TOPIC_CONFIGS",
    "AppendResult",
    "Log",
    "LogConfig",
    "LogManager",
    "ReadResult",
    "validate_topic_configs",
]
