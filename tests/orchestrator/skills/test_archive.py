"""Hostile ZIPs are refused with the entry named, and nothing escapes the staging dir."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from orchestrator.skills import InstallError
from orchestrator.skills._archive import MAX_FILE_BYTES, extract_skill_zip

SKILL_MD = "---\nname: zipped\ndescription: d\n---\nbody\n"


def make_zip(path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]], **kw: object) -> Path:
    with zipfile.ZipFile(path, "w", **kw) as z:  # type: ignore[arg-type]
        for name, data in entries:
            z.writestr(name, data)
    return path


def test_good_zip_keeps_exec_bits(tmp_path: Path) -> None:
    script = zipfile.ZipInfo("zipped/scripts/run.sh")
    script.external_attr = (stat.S_IFREG | 0o755) << 16
    archive = make_zip(
        tmp_path / "z.zip",
        [("zipped/SKILL.md", SKILL_MD.encode()), (script, b"#!/bin/sh\n"), ("__MACOSX/._x", b"")],
    )
    root = Path(extract_skill_zip(str(archive), str(tmp_path / "out")))
    assert root.name == "zipped" and (root / "SKILL.md").read_text() == SKILL_MD
    assert (root / "scripts/run.sh").stat().st_mode & 0o100


def symlink_entry() -> zipfile.ZipInfo:
    info = zipfile.ZipInfo("zipped/link")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("zipped/../../evil", b"x")], "zip-slip"),
        ([("/etc/evil", b"x")], "zip-slip"),
        ([("C:/evil", b"x")], "zip-slip"),
        ([("zipped\\..\\evil", b"x")], "zip-slip"),
        ([("zipped/SKILL.md", b"x"), (symlink_entry(), b"/etc/passwd")], "symlink"),
        ([("SKILL.md", SKILL_MD.encode())], "root must be the skill folder"),
        ([("a/SKILL.md", b"x"), ("b/SKILL.md", b"x")], "root must be the skill folder"),
    ],
)
def test_hostile_entries(
    tmp_path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]], message: str
) -> None:
    archive = make_zip(tmp_path / "z.zip", entries)
    out = tmp_path / "out"
    with pytest.raises(InstallError, match=message):
        extract_skill_zip(str(archive), str(out))
    assert not (tmp_path / "evil").exists()


def test_zip_bomb_by_ratio_is_refused(tmp_path: Path) -> None:
    archive = make_zip(
        tmp_path / "bomb.zip",
        [("zipped/SKILL.md", SKILL_MD.encode()), ("zipped/zeros", b"\0" * (8 * 1024 * 1024))],
        compression=zipfile.ZIP_DEFLATED,
    )
    with pytest.raises(InstallError, match="zip bomb"):
        extract_skill_zip(str(archive), str(tmp_path / "out"))


def test_lying_header_sizes_are_enforced_on_inflated_bytes(tmp_path: Path) -> None:
    archive = make_zip(
        tmp_path / "z.zip", [("zipped/big", b"x" * 1000)], compression=zipfile.ZIP_STORED
    )
    assert MAX_FILE_BYTES > 1000
    with zipfile.ZipFile(archive) as z:
        assert z.getinfo("zipped/big").file_size == 1000


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04garbage", b"not a zip" * 100])
def test_not_a_zip(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.zip"
    path.write_bytes(data)
    with pytest.raises(InstallError, match="not a valid ZIP"):
        extract_skill_zip(str(path), str(tmp_path / "out"))
