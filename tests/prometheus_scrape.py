"""One scrape of a test broker's /metrics, parsed with prometheus_client's parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from compat_tests.broker import BrokerProcess


class Scrape:
    """One scrape of /metrics: sample values by name and labels."""

    def __init__(self, broker: BrokerProcess) -> None:
        port = broker.overrides["metrics.prometheus.port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200
            text = r.read().decode()
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 for a series not (yet) exposed."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def labelled(self, name: str, label: str) -> set[str]:
        return {dict(labels)[label] for n, labels in self.samples if n == name and labels}
