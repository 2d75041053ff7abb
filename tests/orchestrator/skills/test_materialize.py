"""Materialize inline and referenced skills into a directory, preserving exec bits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.skills import (
    DuplicateSkillError,
    InlineSkill,
    InstallError,
    SkillChangedError,
    Tier,
    load_skill,
    materialize,
    skill_hash,
)

WriteSkill = Callable[..., Path]


def test_materialize_inline_and_referenced(tmp_path: Path, write_skill: WriteSkill) -> None:
    src = write_skill(tmp_path / "src", "reffed", files={"scripts/run.sh": "#!/bin/sh\n"})
    (src / "scripts/run.sh").chmod(0o755)
    (src / "alias.md").symlink_to("SKILL.md")
    ref = load_skill(src, tier=Tier.USER, source="t")
    inline = InlineSkill(name="inl", description="d", body="Body\n")
    dest = tmp_path / ".claude" / "skills"
    written = materialize([inline, ref], str(dest))
    assert written == [str(dest / "inl"), str(dest / "reffed")]
    assert skill_hash(dest / "inl") == inline.to_skill().hash
    assert skill_hash(dest / "reffed") == ref.hash
    assert (dest / "reffed/scripts/run.sh").stat().st_mode & 0o100
    assert not (dest / "reffed/alias.md").is_symlink()
    assert materialize([inline, ref], str(dest)) == []  # same hash: left alone
    assert [p.name for p in dest.iterdir()] == sorted(["inl", "reffed"]) or len(
        list(dest.iterdir())
    ) == 2


def test_materialize_refuses_conflicts_and_changes(tmp_path: Path, write_skill: WriteSkill) -> None:
    dest = tmp_path / "out"
    (dest / "inl").mkdir(parents=True)
    (dest / "inl" / "mine.txt").write_text("user data")
    inline = InlineSkill(name="inl", description="d", body="")
    with pytest.raises(InstallError, match="--force"):
        materialize([inline], str(dest))
    assert (dest / "inl" / "mine.txt").exists()
    materialize([inline], str(dest), overwrite=True)
    assert sorted(p.name for p in (dest / "inl").iterdir()) == ["SKILL.md"]
    with pytest.raises(DuplicateSkillError):
        materialize([inline, InlineSkill(name="inl", description="x", body="")], str(dest))
    src = write_skill(tmp_path / "src", "moving")
    skill = load_skill(src, tier=Tier.USER, source="t")
    (src / "SKILL.md").write_text("---\nname: moving\ndescription: changed\n---\n")
    with pytest.raises(SkillChangedError):
        materialize([skill], str(dest))
    assert not (dest / "moving").exists() and [p.name for p in dest.iterdir()] == ["inl"]
