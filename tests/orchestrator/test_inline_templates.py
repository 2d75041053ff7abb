"""Seed 004: inline skill templates filled from the embedding program's values, and
enabled predicates over the recorded session state; replayed and re-driven."""

from __future__ import annotations

import hashlib

import pytest

from orchestrator._events import (
    CatalogSnapshot,
    PromptRendered,
    SessionStarted,
    SkillActivated,
    SkillChanged,
)
from orchestrator._loop import AgentConfigError
from orchestrator._visibility import SkillContext
from orchestrator.skills import InlineSkill, SkillValidationError
from replay import load_recording, redrive, replay_session


def review(language: str) -> InlineSkill:
    return InlineSkill(
        name=f"{language}-review",
        description=f"Review {language} code.",
        body="Review the $language code; style guide ${style}. Costs $$0.\n",
        template=True,
        params={"style": "house"},
        enabled=lambda c: c.params.get("language") == language,
    )


async def proves(store, session_id: str) -> None:  # type: ignore[no-untyped-def]
    recording = await load_recording(store, session_id)
    assert (await replay_session(store, recording)).ok
    report = await redrive(store, recording)
    assert report.ok, report.divergence


async def test_templates_render_from_the_agents_values_and_predicates_pick_skills(
    kit, store
) -> None:
    followup = InlineSkill(
        name="followup",
        description="What to do after a review.",
        body="File the findings.\n",
        enabled=lambda c: "python-review" in c.active,
    )
    agent = kit.agent(
        [
            kit.turn(kit.call("skills.load", names=["python-review"])),
            kit.turn(kit.call("skills.load", names=["followup"], mode="add")),
        ],
        [review("python"), review("typescript"), followup],
        params={"language": "python", "style": "pep8"},
    )
    try:
        session = await agent.run(store, "review this")
    finally:
        agent.close()
    bodies = await kit.bodies(store, session.id)
    started = kit.of_type(bodies, SessionStarted)[0]
    assert started.params == {"language": "python", "style": "pep8"}
    (snapshot,) = kit.of_type(bodies, CatalogSnapshot)
    assert [s.name for s in snapshot.skills] == ["python-review"]
    assert dict(snapshot.hidden) == {
        "followup": "not enabled: its enabled predicate is false",
        "typescript-review": "not enabled: its enabled predicate is false",
    }
    # Loading python-review made followup's predicate true: recorded before the prompt.
    (change,) = kit.of_type(bodies, SkillChanged)
    assert (change.name, change.cause, change.reason) == ("followup", "predicate", "now enabled")
    assert isinstance(bodies[bodies.index(change) + 1], PromptRendered)
    first, second = kit.of_type(bodies, SkillActivated)
    rendered = "Review the python code; style guide pep8. Costs $0.\n"
    assert await store.get_blob(first.body_digest) == rendered.encode()
    # The hash is the hash of the rendered SKILL.md, as materializing it would give.
    skill_md = agent.skills[0].skill_md()  # type: ignore[union-attr]
    assert skill_md.endswith(rendered.encode())
    assert first.hash == skill_hash_of(skill_md)
    assert second.name == "followup"
    await proves(store, session.id)


def skill_hash_of(skill_md: bytes) -> str:
    """docs/skill-hash.md for a one-file skill."""
    digest = hashlib.sha256(skill_md).hexdigest()
    return hashlib.sha256(f"100644 {digest} SKILL.md\0".encode()).hexdigest()


async def test_a_predicate_that_raises_hides_its_skill_with_the_reason(kit, store) -> None:
    def broken(context: SkillContext) -> bool:
        raise KeyError("region")

    skill = InlineSkill(name="eu", description="EU rules.", body="Rules.\n", enabled=broken)
    agent = kit.agent([], [skill])
    try:
        session = await agent.run(store, "hi")
    finally:
        agent.close()
    (snapshot,) = kit.of_type(await kit.bodies(store, session.id), CatalogSnapshot)
    assert snapshot.hidden == (
        ("eu", "not enabled: its enabled predicate raised KeyError: 'region'"),
    )
    await proves(store, session.id)


async def test_directory_skills_take_predicates_from_the_agent(kit, store, make_skill) -> None:
    pdf = make_skill("pdf")
    agent = kit.agent([], [pdf], enabled={"pdf": lambda c: c.turn > 0})
    try:
        session = await agent.run(store, "hi")
    finally:
        agent.close()
    bodies = await kit.bodies(store, session.id)
    assert kit.of_type(bodies, CatalogSnapshot)[0].skills == ()
    with pytest.raises(AgentConfigError, match="'nope'"):
        kit.agent([], [pdf], enabled={"nope": lambda c: True})


def test_unfilled_or_malformed_templates_are_clear_errors() -> None:
    skill = review("python")
    assert skill.unbound() == ("language",)
    with pytest.raises(SkillValidationError, match=r"\$language have no value"):
        skill.to_skill()
    with pytest.raises(AgentConfigError, match=r"python-review.*\$language"):
        from orchestrator._loop import Agent
        from orchestrator.adapters import ScriptedModel

        Agent(model=ScriptedModel([]), model_name="m", skills=[skill])
    with pytest.raises(SkillValidationError, match=r"write \$\$ for a dollar sign"):
        InlineSkill(name="price", description="Prices.", body="It costs $5.\n", template=True)
    # Without template=True a body is text, dollars and all.
    plain = InlineSkill(name="price", description="Prices.", body="It costs $5.\n")
    assert plain.to_skill().body == "It costs $5.\n"
    assert skill.bind({"language": "go"}).to_skill().body.startswith("Review the go code")
    with pytest.raises(SkillValidationError, match=r"params.language: a value must be text"):
        skill.bind({"language": 3})  # type: ignore[dict-item]
