"""The broker-log scan of the report (pure code, no broker)."""

from __future__ import annotations

from fuzzing.report import percentile, tracebacks

LOG = """\
[t] ERROR Unexpected error handling a request from 127.0.0.1:1; closing it (gregor.server.network)
Traceback (most recent call last):
  File "/repo/server/network.py", line 376, in _handle
    self.handler(request.connection, request.frame)
  File "/repo/apis/groups.py", line 80, in handle_describe
    for group in request.groups:
TypeError: 'NoneType' object is not iterable
[t] ERROR accept failed (asyncio)
Traceback (most recent call last):
  File "/usr/lib/python3.11/asyncio/selector_events.py", line 165, in _accept_connection
OSError: [Errno 24] Too many open files
[t] INFO Traceback-free line
"""


def test_tracebacks_are_keyed_by_exception_and_deepest_broker_frame() -> None:
    assert tracebacks(LOG) == {
        "TypeError: 'NoneType' object is not iterable at apis/groups.py:handle_describe": 1,
        "OSError: [Errno 24] Too many open files at no broker frame": 1,
    }


def test_percentile_picks_the_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99)) == (51.0, 100.0)
