"""Inline skills: same rules, same hash as the directory they materialize to."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.skills import InlineSkill, SkillValidationError, parse_skill_md, skill_hash


def test_inline_skill_to_skill_and_tools() -> None:
    tool = object()
    inline = InlineSkill(
        name="code-review",
        description='Reviews code: "quotes", colons: and # hashes.',
        body="# Review\n\nStep 1.\n",
        tools=[tool],  # type: ignore[arg-type]
        metadata={"version": "1.10", "z": "last"},
        allowed_tools="Read Grep",
    )
    skill = inline.to_skill()
    assert (skill.name, skill.source, skill.root, skill.location) == (
        "code-review",
        "inline",
        None,
        None,
    )
    assert skill.description == 'Reviews code: "quotes", colons: and # hashes.'
    assert skill.body == "# Review\n\nStep 1.\n"
    assert skill.properties.metadata == {"version": "1.10", "z": "last"}
    assert inline.tools == (tool,)
    assert skill.hash == inline.manifest().hash


def test_inline_hash_equals_materialized_directory_hash(tmp_path: Path) -> None:
    inline = InlineSkill(name="demo", description="Says hello.", body="Hello\n")
    root = tmp_path / "demo"
    root.mkdir()
    (root / "SKILL.md").write_bytes(inline.skill_md())
    assert skill_hash(root) == inline.to_skill().hash


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"name": "Bad_Name"}, "name-lowercase"),
        ({"name": "../x"}, "name-unsafe"),
        ({"description": ""}, "description-empty"),
        ({"description": "x" * 1025}, "description-max-length"),
        ({"compatibility": ""}, "compatibility-empty"),
        ({"description": "lone \ud800 surrogate"}, "yaml-syntax"),
        ({"body": None}, "inline-type"),
    ],
)
def test_inline_validated_by_the_same_rules(kwargs: dict[str, object], rule: str) -> None:
    args: dict[str, object] = {"name": "ok", "description": "d", "body": ""} | kwargs
    with pytest.raises(SkillValidationError) as info:
        InlineSkill(**args)  # type: ignore[arg-type]
    assert rule in {p.rule for p in info.value.problems}
    assert all(p.file.startswith("inline:") for p in info.value.problems)


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


@given(
    description=texts.filter(lambda s: 0 < len(s.strip()) <= 1024),
    body=texts.filter(lambda s: "\0" not in s),
    value=texts,
)
def test_rendering_round_trips(description: str, body: str, value: str) -> None:
    inline = InlineSkill(name="rt", description=description, body=body, metadata={"k": value})
    parsed = parse_skill_md(inline.skill_md(), path="x", dir_name="rt")
    assert parsed.properties.description == description.strip()
    assert parsed.properties.metadata == {"k": value}
    assert parsed.body == body


def test_nul_in_body_is_rejected() -> None:
    with pytest.raises(SkillValidationError, match="skill-md-binary"):
        InlineSkill(name="x", description="d", body="a\0b")
