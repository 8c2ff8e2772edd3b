"""Output shared by the CLI's subcommands: aligned tables (``rich``) for people, JSON for
scripts, and record bytes as JSON (text when UTF-8, else ``{"base64": ...}``) both ways."""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Sequence
from typing import IO, Any

from rich.console import Console
from rich.table import Table


def console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout by default) for people: colours on a terminal only."""
    out = file or sys.stdout
    return Console(file=out, no_color=not out.isatty(), highlight=False)


def print_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], file: IO[str] | None = None
) -> None:
    """Rows under upper-case headings in aligned columns, like Kafka's tools print them;
    None shows as ``-``. Piped output is plain text without trailing blanks, never cut or
    wrapped to a width, for the next program."""
    out = file or sys.stdout
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in columns:
        table.add_column(name, no_wrap=True)
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    if out.isatty():
        console(out).print(table)
        return
    plain = Console(file=io.StringIO(), width=100_000, no_color=True, highlight=False)
    with plain.capture() as captured:
        plain.print(table)
    out.writelines(line.rstrip() + "\n" for line in captured.get().splitlines())


def print_json(document: Any, file: IO[str] | None = None) -> None:
    out = file or sys.stdout
    json.dump(document, out, indent=1)
    out.write("\n")


def jsonable(value: Any) -> Any:
    """Keys, values and header values as text when they are UTF-8, else {"base64": ...}."""
    if isinstance(value, bytes | bytearray):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def bytes_from_json(value: Any) -> bytes | None:
    """The inverse of ``jsonable`` for one key, value or header value."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and set(value) == {"base64"}:
        return base64.b64decode(value["base64"], validate=True)
    raise ValueError(f'expected text, null or {{"base64": ...}}, got {value!r}')
