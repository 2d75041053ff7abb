"""The skill hash: stable across locations, order and mtimes; sensitive to every byte."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.skills import (
    ManifestEntry,
    ManifestError,
    SkillTreeError,
    hash_manifest,
    manifest_of,
    skill_hash,
)

FILES = {
    "SKILL.md": "---\nname: demo\ndescription: d\n---\nbody\n",
    "scripts/run.sh": "#!/bin/sh\necho hi\n",
    "references/a-b.md": "dash\n",
    "references/a/b.md": "slash\n",
    "assets/ünïcode name.txt": "u\n",
}

# The documented worked example (docs/skill-hash.md), reproducible with coreutils.
DOC_SCRIPT = r"""
find . -name .git -prune -o -type f -print0 | sed -z 's|^\./||' | LC_ALL=C sort -z |
  while IFS= read -r -d '' f; do
    case "$(stat -c %A "$f")" in ???x*) m=100755;; *) m=100644;; esac
    printf '%s %s %s\0' "$m" "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
  done | sha256sum | cut -d' ' -f1
"""


def build(root: Path, files: dict[str, str], order: list[str] | None = None) -> Path:
    for rel in order or list(files):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[rel], encoding="utf-8")
    (root / "scripts/run.sh").chmod(0o755)
    return root


def test_same_content_same_hash_anywhere_any_order_any_mtime(tmp_path: Path) -> None:
    a = build(tmp_path / "one" / "demo", FILES)
    b = build(tmp_path / "elsewhere" / "deeper" / "demo", FILES, order=sorted(FILES, reverse=True))
    os.utime(b / "SKILL.md", ns=(1, 1))
    (b / "empty-dir").mkdir()  # empty directories are not part of a skill
    (b / ".git").mkdir()
    (b / ".git" / "HEAD").write_text("ref: x\n")  # version-control state is not content
    assert skill_hash(a) == skill_hash(b)
    assert skill_hash(str(a)) == manifest_of(a).hash


@pytest.mark.parametrize(
    "change",
    [
        lambda r: (r / "SKILL.md").write_text(FILES["SKILL.md"] + " "),
        lambda r: (r / "references/a-b.md").rename(r / "references/a-c.md"),
        lambda r: (r / "references/a-b.md").chmod(0o744),
        lambda r: (r / "scripts/run.sh").chmod(0o644),
        lambda r: (r / "new.txt").write_text(""),
        lambda r: (r / "references/a/b.md").unlink(),
    ],
    ids=["byte", "rename", "exec-bit-set", "exec-bit-cleared", "new-empty-file", "removed"],
)
def test_any_change_changes_the_hash(tmp_path: Path, change: Callable[[Path], object]) -> None:
    root = build(tmp_path / "demo", FILES)
    before = skill_hash(root)
    change(root)
    assert skill_hash(root) != before


def test_group_and_other_exec_bits_do_not_matter(tmp_path: Path) -> None:
    root = build(tmp_path / "demo", FILES)
    before = skill_hash(root)
    (root / "references/a-b.md").chmod(0o611)
    assert skill_hash(root) == before


def test_coreutils_reproduction_matches(tmp_path: Path) -> None:
    if not shutil.which("bash") or not shutil.which("sha256sum"):
        pytest.skip("coreutils/bash not available")
    root = build(tmp_path / "demo", FILES)
    out = subprocess.run(
        ["bash", "-c", DOC_SCRIPT], cwd=root, capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == skill_hash(root)


def test_documented_worked_example(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_bytes(
        b"---\nname: demo\ndescription: Says hello. Use for demos.\n---\nRun scripts/hello.sh.\n"
    )
    (root / "scripts/hello.sh").write_bytes(b"#!/bin/sh\necho hello\n")
    (root / "scripts/hello.sh").chmod(0o755)
    assert skill_hash(root) == "3091ec08089b616c9d7f93bd19299fdf5369e8143cb7c5c46950c01c676e1d6c"
    doc = Path(__file__).resolve().parents[3] / "docs" / "skill-hash.md"
    assert "3091ec08089b616c9d7f93bd19299fdf5369e8143cb7c5c46950c01c676e1d6c" in doc.read_text()


def test_in_root_symlink_is_hashed_as_the_file(tmp_path: Path) -> None:
    linked = build(tmp_path / "a" / "demo", FILES)
    (linked / "alias.md").symlink_to("references/a-b.md")
    copied = build(tmp_path / "b" / "demo", FILES)
    (copied / "alias.md").write_text(FILES["references/a-b.md"])
    assert skill_hash(linked) == skill_hash(copied)


@pytest.mark.parametrize(
    ("make", "rule"),
    [
        (lambda r: (r / "out").symlink_to("/etc/hostname"), "symlink-escape"),
        (lambda r: (r / "up").symlink_to("../../"), "symlink-escape"),
        (lambda r: (r / "dangling").symlink_to("nothing-here"), "symlink-dangling"),
        (lambda r: (r / "dirlink").symlink_to("references"), "symlink-not-file"),
        (lambda r: os.mkfifo(r / "fifo"), "tree-special-file"),
    ],
)
def test_refused_entries_say_why(tmp_path: Path, make: Callable[[Path], object], rule: str) -> None:
    root = build(tmp_path / "demo", FILES)
    make(root)
    with pytest.raises(SkillTreeError) as info:
        skill_hash(root)
    assert f"({rule})" in str(info.value)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SkillTreeError, match="not a directory"):
        skill_hash(tmp_path / "missing")


def entry(path: str, data: bytes = b"x", executable: bool = False) -> ManifestEntry:
    return ManifestEntry(path=path, executable=executable, sha256=hashlib.sha256(data).hexdigest())


def test_hash_manifest_is_order_independent_and_matches_disk(tmp_path: Path) -> None:
    root = build(tmp_path / "demo", FILES)
    entries = [entry(rel, FILES[rel].encode(), executable=rel == "scripts/run.sh") for rel in FILES]
    assert hash_manifest(entries) == hash_manifest(reversed(entries)) == skill_hash(root)


@pytest.mark.parametrize("path", ["", "/abs", "../x", "a//b", "a/./b", "a/", "x\0y", "."])
def test_hash_manifest_refuses_bad_paths(path: str) -> None:
    with pytest.raises(ManifestError):
        hash_manifest([entry(path)])


def test_hash_manifest_refuses_bad_digests_and_duplicates() -> None:
    with pytest.raises(ManifestError, match="64 lowercase hex"):
        hash_manifest([ManifestEntry(path="a", executable=False, sha256="ABC")])
    with pytest.raises(ManifestError, match="twice"):
        hash_manifest([entry("a"), entry("a", b"y")])


@given(
    st.dictionaries(
        st.text(
            st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1
        ).filter(lambda s: s not in (".", "..")),
        st.tuples(st.binary(max_size=20), st.booleans()),
        max_size=6,
    )
)
def test_hash_manifest_injective_on_small_changes(files: dict[str, tuple[bytes, bool]]) -> None:
    entries = [entry(p, d, x) for p, (d, x) in files.items()]
    h = hash_manifest(entries)
    assert len(h) == 64
    for i, e in enumerate(entries):
        flipped = [
            *entries[:i],
            ManifestEntry(path=e.path, executable=not e.executable, sha256=e.sha256),
            *entries[i + 1 :],
        ]
        assert hash_manifest(flipped) != h
