"""Builds the C record walker (wire/_recordwalk.c), the request histogram counter
(server/_histograms.c) and the log cleaner's offset map (log/_offsetmap.c); everything else
is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("gregor.wire._recordwalk", ["wire/_recordwalk.c"], extra_compile_args=["-O2"]),
        Extension(
            "gregor.server._histograms", ["server/_histograms.c"], extra_compile_args=["-O2"]
        ),
        Extension("gregor.log._offsetmap", ["log/_offsetmap.c"], extra_compile_args=["-O2"]),
    ]
)
