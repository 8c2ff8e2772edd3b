"""Broker processes for tests: the launcher the pytest plugin, Gregor's own tests and the
benchmarks use (``broker_process.py``), and the plugin itself (``pytest_plugin.py``)."""
