"""``--command-config FILE`` on every ``gregor`` client subcommand: Kafka's client properties
reach the tools' client (security against a broker: tests/test_security_clients.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.server.cli.main import main
from tests.cli_run import gregor

BOOTSTRAP = ("--bootstrap-server", "127.0.0.1:1")  # never reached: the config is refused first
COMMANDS = [
    ("topics", "--list"),
    ("groups", "--list"),
    ("configs", "--describe", "--entity-type", "topics", "--entity-name", "t"),
    ("quotas", "--describe"),
    ("produce", "--topic", "t"),
    ("consume", "--topic", "t"),
    ("perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "1"),
    ("perf", "consume", "--topic", "t", "--num-records", "1"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_client_command_takes_command_config(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "# Kafka's default mechanism, which Gregor's clients refuse\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.password=never-shown\n"
    )
    args = [*command, *BOOTSTRAP, "--command-config", str(config)]
    if command[0] == "perf" and command[1] == "produce":
        args += ["--throughput", "-1"]
    result = gregor(*args)
    assert result.code == 1
    assert "sasl.mechanism GSSAPI is not supported" in result.err
    assert "never-shown" not in result.err


def test_an_unreadable_command_config_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["topics", "--list", *BOOTSTRAP, "--command-config", str(tmp_path / "missing")])
    assert exited.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("gregor topics: error: argument --command-config: cannot read ")
