"""eventlog.output_file: an output file is replaced whole or left as it was."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from eventlog import OutputError, output_file, write_file


def test_the_new_content_replaces_the_file_and_nothing_else_is_left(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_bytes(b"old")
    write_file(out, b"new")
    assert out.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_a_symlink_is_written_through_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "dotfiles").mkdir()
    real = tmp_path / "dotfiles" / "config.yaml"
    real.write_bytes(b"old")
    link = tmp_path / "config.yaml"
    link.symlink_to(real)
    write_file(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["config.yaml"]


def test_a_failing_block_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError), output_file(out) as f:
        f.write(b"half of it")
        raise RuntimeError("the source failed")
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["export.jsonl"]


def test_a_failing_block_leaves_no_file_where_there_was_none(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), output_file(tmp_path / "x") as f:
        f.write(b"part")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []


def test_mode_and_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_file(tmp_path / "public", b"x")
        write_file(tmp_path / "secret", b"x", mode=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "public").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600


def test_exclusive_never_replaces(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"keep me")
    with pytest.raises(OutputError, match=r"key file .*key: already exists; refusing to replace"):
        write_file(key, b"other", what="key file", exclusive=True)
    assert key.read_bytes() == b"keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_a_special_file_is_written_directly_and_its_error_is_one_line() -> None:
    with pytest.raises(OutputError) as e:
        write_file("/dev/full", b"x" * 100_000, what="export file", option="--out")
    assert str(e.value) == (
        "export file /dev/full: cannot write: no space left on device: free space or "
        "choose another --out"
    )
    write_file("/dev/null", b"x")  # and a device that takes the bytes is simply written


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no/such/dir/x", "no such directory: create it or choose another --out"),
        ("", "is a directory: name a file"),
    ],
)
def test_errors_say_what_to_do(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(OutputError, match=message):
        write_file(tmp_path / name if name else tmp_path, b"x", option="--out")
    assert list(tmp_path.iterdir()) == []


def test_stale_temporaries_go_but_one_being_written_stays(tmp_path: Path) -> None:
    """A leftover of a dead writer (no lock) is removed; the temporary file of a writer
    still running (it holds the lock) is not, and that writer still completes."""
    from eventlog._output import remove_stale_temporaries

    target = tmp_path / "a.jsonl"
    stale = tmp_path / ".a.jsonl.abcd1234.tmp"
    stale.write_bytes(b"half")
    (tmp_path / ".b.jsonl.abcd1234.tmp").write_bytes(b"another file's")
    with output_file(target, exclusive=True) as f:
        f.write(b"whole")
        assert remove_stale_temporaries(target) == (str(stale),)
        assert len(list(tmp_path.glob(".a.jsonl.*.tmp"))) == 1  # the live writer's
    assert target.read_bytes() == b"whole"
    assert [p.name for p in tmp_path.glob(".*.tmp")] == [".b.jsonl.abcd1234.tmp"]
