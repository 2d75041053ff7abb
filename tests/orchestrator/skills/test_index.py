"""The persistent index: a warm start re-reads nothing unchanged, and notices changes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import orchestrator.skills._hash as hash_module
from orchestrator.skills import SkillIndex, SkillIndexError, SkillSource, Tier, build_catalog

WriteSkill = Callable[..., Path]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every file the hasher reads."""
    seen: list[str] = []
    real = hash_module.sha256_file

    def spy(path: str, size: int, keep: bool = False) -> tuple[str, bytes | None]:
        seen.append(path)
        return real(path, size, keep)

    monkeypatch.setattr(hash_module, "sha256_file", spy)
    return seen


def setup(
    tmp_path: Path, write_skill: WriteSkill, backdate: Callable[[Path], None]
) -> list[SkillSource]:
    src = tmp_path / "src"
    for i in range(5):
        write_skill(src, f"skill-{i}", files={"references/r.md": f"ref {i}\n"})
    write_skill(src, "broken", frontmatter="name: broken\n")
    backdate(src)
    return [SkillSource(path=str(src), tier=Tier.USER, label="t")]


def test_warm_start_reads_nothing_and_gives_the_same_catalog(
    tmp_path: Path, write_skill: WriteSkill, backdate: Callable[[Path], None], reads: list[str]
) -> None:
    sources = setup(tmp_path, write_skill, backdate)
    db = str(tmp_path / "skillog.db")
    cold = build_catalog(sources, index=SkillIndex(db))
    assert len(reads) == 11  # 5 skills x 2 files + the broken SKILL.md
    reads.clear()
    warm = build_catalog(sources, index=SkillIndex(db))
    assert reads == []
    assert warm.record == cold.record and len(warm.rejected) == 1


def test_changes_are_seen(
    tmp_path: Path, write_skill: WriteSkill, backdate: Callable[[Path], None], reads: list[str]
) -> None:
    sources = setup(tmp_path, write_skill, backdate)
    db = str(tmp_path / "skillog.db")
    cold = build_catalog(sources, index=SkillIndex(db))
    src = Path(sources[0].path)
    (src / "skill-1/references/r.md").write_text("changed 1\n")
    (src / "skill-2/references/r.md").chmod(0o755)
    (src / "skill-3/references/new.md").write_text("new\n")
    (src / "broken/SKILL.md").write_text("---\nname: broken\ndescription: fixed\n---\n")
    reads.clear()
    warm = build_catalog(sources, index=SkillIndex(db))
    touched = {Path(p).parts[-3] if "references" in p else Path(p).parts[-2] for p in reads}
    assert touched == {"skill-1", "skill-2", "skill-3", "broken"}
    before = {e.name: e.hash for e in cold.entries}
    after = {e.name: e.hash for e in warm.entries}
    assert {n for n in before if before[n] != after[n]} == {"skill-1", "skill-2", "skill-3"}
    assert "broken" in after and warm.rejected == ()
    # Recently modified trees are racy: they are re-read until they age.
    reads.clear()
    build_catalog(sources, index=SkillIndex(db))
    assert reads and all("skill-0" not in p for p in reads)


def test_removed_skills_leave_the_index(
    tmp_path: Path, write_skill: WriteSkill, backdate: Callable[[Path], None]
) -> None:
    sources = setup(tmp_path, write_skill, backdate)
    db = str(tmp_path / "skillog.db")
    build_catalog(sources, index=SkillIndex(db))
    import shutil

    shutil.rmtree(Path(sources[0].path) / "skill-4")
    cat = build_catalog(sources, index=SkillIndex(db))
    assert "skill-4" not in {e.name for e in cat.entries}
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM skills_index").fetchone()[0]
    assert rows == 5


def test_shares_the_database_and_survives_garbage(tmp_path: Path) -> None:
    db = tmp_path / "skillog.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE events (x)")
    conn.execute("INSERT INTO events VALUES (1)")
    conn.commit()
    index = SkillIndex(str(db))
    index.save([], keep=set(), now=0)
    assert conn.execute("SELECT x FROM events").fetchall() == [(1,)]
    conn.execute("UPDATE skills_schema SET version = 999")
    conn.commit()
    assert SkillIndex(str(db)).load() == {}  # a newer/older cache layout is rebuilt
    assert SkillIndex.decode(b"{not json") is None
    bad = tmp_path / "not.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SkillIndexError, match=r"not\.db"):
        SkillIndex(str(bad))
    with pytest.raises(SkillIndexError):
        SkillIndex(str(tmp_path / "no-such-dir" / "x.db"))


def test_new_hostile_entry_in_a_cached_skill_is_seen(
    tmp_path: Path, write_skill: WriteSkill, backdate: Callable[[Path], None]
) -> None:
    sources = setup(tmp_path, write_skill, backdate)
    db = str(tmp_path / "skillog.db")
    build_catalog(sources, index=SkillIndex(db))
    (Path(sources[0].path) / "skill-0" / "references" / "leak").symlink_to("/etc/hostname")
    cat = build_catalog(sources, index=SkillIndex(db))
    assert "skill-0" not in {e.name for e in cat.entries}
    assert any(p.rule == "symlink-escape" for r in cat.rejected for p in r.problems)


def test_a_new_index_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """The index may create the log's file: owner-only, as the log makes it (and its
    -wal/-shm take that mode); an existing file keeps its own."""
    SkillIndex(str(tmp_path / "new.db")).close()
    assert (tmp_path / "new.db").stat().st_mode & 0o777 == 0o600
    existing = tmp_path / "existing.db"
    existing.touch(mode=0o640)
    existing.chmod(0o640)
    SkillIndex(str(existing)).close()
    assert existing.stat().st_mode & 0o777 == 0o640
