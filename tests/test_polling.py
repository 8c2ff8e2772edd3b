"""The event loop's selector: it polls after I/O while requests come back quickly, with a
window that adapts to how quickly, and sleeps when idle.

Real sockets and a real epoll selector underneath; the non-blocking polls it makes are
counted on their way down to that selector.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gregor.server.polling import PollingSelector

MAX_POLL_S = 0.05
QUICK_S = 0.02  # a request this soon after the last is worth polling for


class _CountingEpoll(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    polls = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            self.polls += 1
        return super().select(timeout)


class _Selector(PollingSelector, _CountingEpoll):
    """PollingSelector over an epoll selector that counts the non-blocking polls."""


Pair = tuple[_Selector, socket.socket, socket.socket]


@pytest.fixture
def pair() -> Iterator[Pair]:
    selector = _Selector(MAX_POLL_S)
    ours, theirs = socket.socketpair()
    selector.register(ours, selectors.EVENT_READ)
    yield selector, ours, theirs
    selector.close()
    ours.close()
    theirs.close()


def _polls_of(selector: _Selector, timeout: float) -> int:
    """How many non-blocking polls one wait that brings nothing makes."""
    before = selector.polls
    assert selector.select(timeout) == []
    return selector.polls - before


def _request_after(pair: Pair, delay_s: float) -> None:
    """The peer sends a byte ``delay_s`` from now; the selector waits for it."""
    selector, ours, theirs = pair
    sender = threading.Timer(delay_s, theirs.send, [b"x"])
    sender.start()
    ready = selector.select(5.0)
    sender.join()
    assert [key.fileobj for key, _ in ready] == [ours]
    assert ours.recv(1) == b"x"


def _grow(pair: Pair) -> float:
    """Requests every QUICK_S until polling catches them; the window that took."""
    for _ in range(40):  # from 25 us, doubling: about ten requests
        _request_after(pair, QUICK_S)
        if pair[0].window_s >= QUICK_S:
            break
    window = pair[0].window_s
    assert QUICK_S <= window <= MAX_POLL_S
    return window


def test_idle_selector_sleeps(pair: Pair) -> None:
    selector = pair[0]
    assert _polls_of(selector, MAX_POLL_S) == 0
    assert selector.window_s == 0


def test_quick_requests_grow_the_window_until_polling_catches_them(pair: Pair) -> None:
    selector = pair[0]
    window = _grow(pair)
    _request_after(pair, QUICK_S / 4)  # caught while polling: the window stays
    assert selector.window_s == window
    # A wait that brings nothing polls through the window, then sleeps out the rest.
    started = time.monotonic()
    assert _polls_of(selector, 3 * MAX_POLL_S) > 1
    assert time.monotonic() - started >= 3 * MAX_POLL_S * 0.9
    # That wake-up brought no I/O, so the next wait sleeps at once.
    assert _polls_of(selector, MAX_POLL_S) == 0


def test_slow_requests_shrink_the_window_to_nothing(pair: Pair) -> None:
    selector = pair[0]
    _grow(pair)
    for _ in range(12):
        _request_after(pair, MAX_POLL_S * 1.2)
    assert selector.window_s == 0


def test_polling_never_outlasts_a_shorter_timeout(pair: Pair) -> None:
    selector = pair[0]
    _grow(pair)
    started = time.monotonic()
    assert selector.select(0.002) == []
    assert time.monotonic() - started < QUICK_S
    assert selector.select(0) == []
