"""Builds the C record walker (wire/_recordwalk.c); everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("wire._recordwalk", ["wire/_recordwalk.c"], extra_compile_args=["-O2"]),
    ]
)
