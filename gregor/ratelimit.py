"""Log lines that may repeat in a storm (a full descriptor table, a flood of refused
connections) are written at most once per interval per kind, with a count of the ones left
out, so the log stays readable and the disk does not fill with it."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    """``log(kind, level, msg, *args)`` writes at most one line per ``kind`` every
    ``interval_s``; the next line written says how many of that kind were suppressed."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(self, kind: str, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            msg += " (%d similar message(s) suppressed)"
            args = (*args, suppressed)
        self.logger.log(level, msg, *args)
