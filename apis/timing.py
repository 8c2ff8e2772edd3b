"""The timing of one request while metrics are on: the dispatcher makes it, the network
layer finishes it, server/metrics.py counts it. A list, not an object: one is made and
filled for every request, and a list costs a fraction of an instance's __init__.

Its slots: the request's kind (the API key; FOLLOWER_FETCH for a follower's fetch) and
version, then the moments (``time.perf_counter_ns``) it was handed to the handler pool, a
handler started on it, the handler returned a future (0: it answered at once), the response
was handed to the connection (0: none), and it ended; its throttle time (ms); and the
BrokerMetrics that counts it once it ends."""

from __future__ import annotations

from typing import Any, TypeAlias

KIND, VERSION, RECEIVED, DEQUEUED, LOCAL_DONE, SENT, END, THROTTLE_MS, METRICS = range(9)
FOLLOWER_FETCH = -1

RequestTiming: TypeAlias = list[Any]
