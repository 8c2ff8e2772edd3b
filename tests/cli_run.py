"""Running ``gregor`` subcommands in the test process (``gregor.server.cli.main``, as the console
script does) with standard input, output and error captured: a subprocess per call would
cost half a second of imports."""

from __future__ import annotations

import io
import json
import sys
import uuid
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any
from unittest import mock

from gregor.server.cli.main import main


@dataclass(frozen=True)
class CliResult:
    code: int
    raw: bytes  # standard output's bytes
    err: str

    @property
    def out(self) -> str:
        return self.raw.decode()

    def json(self) -> Any:
        return json.loads(self.raw)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.raw.splitlines()]


def gregor(*args: str, stdin: bytes = b"") -> CliResult:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.StringIO()
    fake_stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    with redirect_stdout(out), redirect_stderr(err), mock.patch.object(sys, "stdin", fake_stdin):
        code = main(list(args))
    out.flush()
    return CliResult(code, out.buffer.getvalue(), err.getvalue())  # type: ignore[attr-defined]


def ok(*args: str, stdin: bytes = b"") -> CliResult:
    """``gregor`` that must succeed."""
    result = gregor(*args, stdin=stdin)
    assert result.code == 0, result.err
    return result


def new_topic(bootstrap: str, prefix: str, partitions: int = 1) -> str:
    """A fresh topic, made with ``gregor topics --create``."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    ok(
        "topics",
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        name,
        "--partitions",
        str(partitions),
    )
    return name


def table(text: str) -> list[dict[str, str]]:
    """The rows of a table the CLI printed (upper-case headings, columns two spaces or more
    apart, ``-`` for none), as dicts by heading."""
    lines = [line for line in text.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.split()[0].isupper())
    heading = lines[start]
    # Column starts: where a heading word begins after two or more blanks.
    starts = [0] + [
        i for i in range(2, len(heading)) if heading[i - 2 : i] == "  " and heading[i] != " "
    ]
    names = [heading[a:b].strip() for a, b in zip(starts, starts[1:] + [None], strict=True)]
    rows = []
    for line in lines[start + 1 :]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows
