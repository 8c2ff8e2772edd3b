"""`scripts/bench --metrics SECONDS`: a Prometheus stand-in that scrapes Gregor's /metrics
every SECONDS while a scenario runs, so a run with metrics on pays for the recording and
for the scrapes, as a monitored broker does."""

from __future__ import annotations

import threading
import time
import urllib.request


class Scraper:
    def __init__(self, port: int, every_s: float) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every_s = every_s
        self.scrapes = 0
        self.slowest_s = 0.0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-scraper", daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        """Start scraping; with ``every_s`` 0, never (metrics recorded, not collected)."""
        if self.every_s > 0:
            self._thread.start()

    def stop(self) -> str:
        """Stop; a line saying how the scrapes went."""
        self._stop.set()
        self._thread.join()
        failed = f", {len(self.failures)} failed ({self.failures[0]})" if self.failures else ""
        return f"{self.scrapes} scrapes, slowest {self.slowest_s * 1000:.0f} ms{failed}"

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    response.read()
            except OSError as e:
                self.failures.append(str(e))
                continue
            self.scrapes += 1
            self.slowest_s = max(self.slowest_s, time.monotonic() - started)
