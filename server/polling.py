"""The event loop's selector, which polls for a moment before it sleeps.

A broker answering one client at a time (a consumer committing synchronously, a producer
waiting for each acknowledgement) goes to sleep in ``epoll_wait`` after every response and
is woken for the next request a hundred or so microseconds later. On a virtual machine
that wake-up is costly: the idle vCPU has halted, and restarting it adds tens of
microseconds to every round trip. Polling first, without blocking, catches the next
request on a running CPU (Seastar, the engine under Redpanda, does the same with its
``idle-poll-time-us``).

The polling window adapts as Linux's haltpoll cpuidle governor does: it grows while the
next request arrives within ``max_poll_s`` of the previous wake-up and shrinks when
requests come further apart, so clients that keep the broker waiting longer (a producer
batching its records) do not lose CPU to it. Between polls the CPU is offered to other
threads. Only a wake-up that brought I/O is followed by polling: a broker woken by a
timer alone, or idle, sleeps at once.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import time

_GROW_FROM_S = 25e-6  # the first window after none


class PollingSelector(selectors.DefaultSelector):
    def __init__(self, max_poll_s: float) -> None:
        super().__init__()
        self.max_poll_s = max_poll_s
        self.window_s = 0.0  # how long the next wait polls before it sleeps
        self._talking = False  # the last wake-up brought I/O

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(0)
        polled = 0.0
        if self._talking and self.window_s > 0:
            polled = self.window_s if timeout is None else min(self.window_s, timeout)
            deadline = time.monotonic() + polled
            while True:
                ready = super().select(0)
                if ready:
                    return ready
                if time.monotonic() >= deadline:
                    break
                os.sched_yield()
            if timeout is not None:
                timeout -= polled
        slept_from = time.monotonic()
        ready = super().select(timeout)
        self._talking = bool(ready)
        if ready:
            self._adapt(polled + time.monotonic() - slept_from)
        return ready

    def _adapt(self, waited_s: float) -> None:
        if waited_s <= self.max_poll_s:  # a longer window would have caught it
            self.window_s = min(self.max_poll_s, max(2 * self.window_s, _GROW_FROM_S))
        else:
            self.window_s = self.window_s / 2 if self.window_s / 2 >= _GROW_FROM_S else 0.0


def new_event_loop(max_poll_us: int) -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(PollingSelector(max_poll_us / 1e6))
