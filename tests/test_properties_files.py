"""``.properties`` files: ``read_properties`` (``server/config.py``) reads Java's syntax as
``java.util.Properties.load`` does, and what the harness writes (``server/harness/properties.py``)
reads back unchanged, by Gregor and by Java itself, JAAS and multi-line PEM values included."""

from __future__ import annotations

import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.server.config import read_properties
from gregor.server.harness.properties import format_properties, write_properties

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="p=a:s#s!w\\\\o rd" user_broker="p=a:s#s!w\\\\o rd";'
)
PEM = (
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\nQ2VydGlmaWNhdGU=\n"
    "-----END CERTIFICATE-----\n"
)
AWKWARD = {
    "listener.name.broker.plain.sasl.jaas.config": JAAS,
    "ssl.truststore.certificates": PEM,
    "key with spaces=and:separators": "  leading spaces kept, trailing too  ",
    "#not-a-comment": "!nor this",
    "unicode": "Grégor ☕ 𝄞",
    "tabs\tand\fform feeds": "\t\r\f",
    "empty": "",
    "backslash-at-end": "C:\\data\\",
}
# Java: prints each loaded key and value as hex UTF-8, then store()s them (ASCII, \uXXXX).
JAVA_PROPS = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class Props {
    public static void main(String[] args) throws IOException {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            p.load(new InputStreamReader(in, StandardCharsets.UTF_8));
        }
        HexFormat hex = HexFormat.of();
        for (String k : p.stringPropertyNames()) {
            System.out.println(hex.formatHex(k.getBytes(StandardCharsets.UTF_8)) + " "
                + hex.formatHex(p.getProperty(k).getBytes(StandardCharsets.UTF_8)));
        }
        try (OutputStream out = new FileOutputStream(args[1])) {
            p.store(out, "stored by Java");
        }
    }
}
"""


def test_javas_syntax(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n"
        "  ! also a comment \\\n"
        "broker.id=3\n"
        "listeners : PLAINTEXT://h:1\n"
        "log.dirs=/a,\\\n"
        "     /b\n"
        "spaced   value with  inner  spaces  \n"
        "colon:value=with=equals\n"
        "escaped\\ key\\=x = \\ lead\\ttab\\u00e9\\\\\n"
        "continued = one\\\r\n"
        "  # not a comment inside a continuation\r"
        "bare\n"
        "empty=\n"
        "\t\f\n"
        "odd=\\\\\\\n"
        "  end"
    )
    assert read_properties(path) == {
        "broker.id": "3",
        "listeners": "PLAINTEXT://h:1",
        "log.dirs": "/a,/b",
        "spaced": "value with  inner  spaces  ",
        "colon": "value=with=equals",
        "escaped key=x": " lead\ttabé\\",
        "continued": "one# not a comment inside a continuation",
        "bare": "",
        "empty": "",
        "odd": "\\end",
    }


def test_malformed_unicode_escape_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("key=\\u12G4\n")
    with pytest.raises(ValueError, match="Malformed"):
        read_properties(path)


def test_what_the_harness_writes_reads_back_unchanged(tmp_path: Path) -> None:
    path = write_properties(tmp_path / "server.properties", AWKWARD)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text(encoding="ascii") == format_properties(AWKWARD)
    assert read_properties(path) == AWKWARD
    # Written again over a file that was readable by others: 0600 still.
    path.chmod(0o644)
    write_properties(path, {"a": "b"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), st.text(), max_size=5))
def test_any_strings_round_trip(properties: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = write_properties(Path(directory) / "p.properties", properties)
        assert read_properties(path) == properties


def test_java_reads_what_the_harness_writes_and_gregor_reads_what_java_stores(
    tmp_path: Path,
) -> None:
    source = tmp_path / "Props.java"
    source.write_text(JAVA_PROPS)
    written = write_properties(tmp_path / "ours.properties", AWKWARD)
    stored = tmp_path / "java.properties"
    run = subprocess.run(
        ["java", source.name, str(written), str(stored)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    loaded = {}
    for line in run.stdout.splitlines():
        key, _, value = line.partition(" ")
        loaded[bytes.fromhex(key).decode()] = bytes.fromhex(value).decode()
    assert loaded == AWKWARD
    assert stored.read_text(encoding="ascii").startswith("#stored by Java")
    assert read_properties(stored) == AWKWARD
