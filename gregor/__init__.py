"""Gregor: a Kafka-wire-compatible broker written in Python.

The public API is what this module offers; everything under ``gregor.<folder>`` (``wire``,
``apis``, ``log``, ``replica``, ``controller``, ``coordinator``, ``server``) is Gregor's
own code and may change without notice.

``gregor.__version__``
    The installed version (``gregor --version`` prints it too).

``gregor.Broker(directory, overrides=None)``
    A broker inside this process, on a free local port (``gregor.inprocess``)::

        async with gregor.Broker(tmp_path) as broker:    # in a running event loop
            ... broker.bootstrap ...                     # "127.0.0.1:<port>"

        with gregor.Broker(tmp_path) as broker:          # from plain threaded code: the
            ... broker.bootstrap ...                     # broker runs on a thread of its own

    ``await broker.start()`` / ``await broker.stop()`` and ``broker.start_in_thread()`` /
    ``broker.stop_in_thread()`` are the same without ``with``.

``gregor.BrokerProcess(directory, overrides=None)``
    A broker in a child process (``gregor.server.harness.broker_process``), the one the pytest
    plugin's fixtures hand out: ``start()``, ``stop()``, ``restart()``, ``kill()`` (kill -9
    and a recovering start), ``create_topic(name, partitions, config)``, ``bootstrap``,
    ``log_path``, ``data_dir``; a context manager. ``gregor.BrokerProcessError`` is what
    it raises.

``overrides`` are ``server.properties`` settings (Kafka's key names), as ``gregor serve
--override key=value`` takes them.

``import gregor`` is cheap: the names above are imported on first use.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False  # (not importing typing keeps `import gregor` cheap)
if TYPE_CHECKING:
    from typing import Any

    from gregor.inprocess import Broker
    from gregor.server.harness.broker_process import BrokerProcess, BrokerProcessError

__all__ = ["Broker", "BrokerProcess", "BrokerProcessError", "__version__"]

# In a source checkout that is on sys.path without being installed (a launcher's
# PYTHONPATH, a virtualenv whose editable install points at another worktree), the
# subpackages are this repository's top-level folders: look for them there too.
_checkout = Path(__file__).resolve().parent.parent
if (
    not Path(__file__).with_name("server").is_dir()
    and (_checkout / "server" / "__init__.py").is_file()
    and (_checkout / "pyproject.toml").is_file()
):
    __path__.append(str(_checkout))
del _checkout

_LAZY = {
    "Broker": "gregor.inprocess",
    "BrokerProcess": "gregor.server.harness.broker_process",
    "BrokerProcessError": "gregor.server.harness.broker_process",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("gregor")
        except PackageNotFoundError:  # a checkout that was never installed
            value = "0+unknown"
        globals()[name] = value
        return value
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gregor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
