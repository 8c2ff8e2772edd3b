"""Servers run as child processes, for tests and benchmarks: the one launcher (a process
with its log and its port, ``process.py``), Gregor's broker and its peer brokers
(``broker_process.py``), ZooKeeper (``zookeeper.py``), a ZooKeeper cluster of brokers
(``cluster.py``), and the pytest plugin for users' suites (``pytest_plugin.py``)."""
