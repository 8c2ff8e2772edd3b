"""Session timers of the members of consumer-protocol and share groups: a heartbeat pushes
the deadline out, and the timer is only moved when it would fire early (heartbeats come
often, far more than sessions end)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class SessionHolder(Protocol):
    session_deadline: float
    session_timer: asyncio.TimerHandle | None


def extend_session(member: SessionHolder, timeout_ms: int, expired: Callable[[], None]) -> None:
    """Push the member's session deadline to ``timeout_ms`` from now; ``expired`` is
    called once the deadline passes without another extension."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    member.session_deadline = deadline
    timer = member.session_timer
    if timer is not None:
        if timer.when() <= deadline:
            return
        timer.cancel()
    member.session_timer = loop.call_at(deadline, _fire, member, expired)


def _fire(member: SessionHolder, expired: Callable[[], None]) -> None:
    member.session_timer = None
    loop = asyncio.get_running_loop()
    if member.session_deadline > loop.time():
        member.session_timer = loop.call_at(member.session_deadline, _fire, member, expired)
        return
    expired()
