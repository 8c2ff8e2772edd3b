"""``gregor``'s usage errors, as argparse subcommands should have them: a bad option or a
missing argument of a subcommand is that subcommand's error, under its own usage, exit 2;
a repeated ``--topic`` where the tool takes one topic is refused, never the last one
winning (``gregor groups`` takes several, tested in test_cli_groups.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gregor.server.cli.main import main

B = ("--bootstrap-server", "127.0.0.1:9")

# Each subcommand with the arguments it needs (before the bad one).
SUBCOMMANDS = {
    "serve": (),
    "dump-log": ("--files", "x.log"),
    "topics": (*B, "--list"),
    "groups": (*B, "--list"),
    "configs": (*B, "--describe", "--entity-type", "topics"),
    "quotas": (*B, "--describe"),
    "acls": (*B, "--list"),
    "produce": (*B, "--topic", "t"),
    "consume": (*B, "--topic", "t"),
    "perf produce": (
        *B,
        "--topic",
        "t",
        "--num-records",
        "1",
        "--record-size",
        "1",
        "--throughput",
        "1",
    ),
    "perf consume": (*B, "--topic", "t", "--num-records", "1"),
}


def usage_error(*args: str) -> str:
    """``gregor args`` as a process, which must stop with argparse's exit 2; its standard
    error."""
    result = subprocess.run(
        [sys.executable, "-m", "gregor.server.cli", *args], capture_output=True, text=True
    )
    assert result.returncode == 2, result
    assert result.stdout == ""
    return result.stderr


def in_process_usage_error(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*name.split(), *SUBCOMMANDS[name], *args])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: gregor {name} ")
    return err.splitlines()[-1]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_unknown_option_shows_the_subcommand_usage(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    last = in_process_usage_error(capsys, name, "--no-such-option")
    assert last == f"gregor {name}: error: unrecognized arguments: --no-such-option"


@pytest.mark.parametrize("name", ["topics", "produce", "consume", "perf produce", "perf consume"])
def test_a_repeated_topic_is_refused(capsys: pytest.CaptureFixture[str], name: str) -> None:
    first = () if "--topic" in SUBCOMMANDS[name] else ("--topic", "t")
    last = in_process_usage_error(capsys, name, *first, "--topic", "other")
    assert last.startswith(f"gregor {name}: error: argument --topic: given more than once: ")


def test_missing_argument_and_exit_status_as_the_shell_sees_them() -> None:
    err = usage_error("topics", "--list")
    assert err.startswith("usage: gregor topics ")
    assert err.splitlines()[-1] == (
        "gregor topics: error: the following arguments are required: --bootstrap-server"
    )
    err = usage_error("groups", *B, "--describe", "--bogus")
    assert err.startswith("usage: gregor groups ")
    assert err.splitlines()[-1] == "gregor groups: error: unrecognized arguments: --bogus"
    err = usage_error("perf", "consume", "--num-records", "x")
    assert err.startswith("usage: gregor perf consume ")
    # No subcommand at all: the top-level usage.
    assert usage_error().startswith("usage: gregor [-h] [--version]")


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gregor.server.cli", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.startswith("gregor ")


def test_the_command_line_imports_no_protocol_schemas_before_its_hypothesis_guard() -> None:
    """kio builds hypothesis strategies when hypothesis is importable (~200 MB at start-up);
    ``main`` blocks hypothesis first, so importing it must not pull in kio."""
    probe = "import sys, gregor.server.cli.main; print('kio' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
