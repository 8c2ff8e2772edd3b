"""Builds the C record walker (wire/_recordwalk.c) and the request histogram counter
(server/_histograms.c); everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("wire._recordwalk", ["wire/_recordwalk.c"], extra_compile_args=["-O2"]),
        Extension("server._histograms", ["server/_histograms.c"], extra_compile_args=["-O2"]),
    ]
)
