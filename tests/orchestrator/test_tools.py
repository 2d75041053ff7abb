"""The runtime tools through the real loop: each tool, each error, each event."""

from __future__ import annotations

import base64
import json

from orchestrator._events import (
    PolicyConfig,
    ResourceRead,
    SessionEnded,
    SkillActivated,
    SkillChanged,
    SkillDeactivated,
    ToolCalled,
    ToolCompleted,
)


def results(bodies: list[object]) -> list[ToolCompleted]:
    return [b for b in bodies if isinstance(b, ToolCompleted)]


async def run(kit, store, turns, skills, **kw):  # type: ignore[no-untyped-def]
    agent = kit.agent(turns, skills, **kw)
    try:
        session = await agent.run(store, "do the task")
    finally:
        agent.close()
    return session, await kit.bodies(store, session.id)


async def test_load_then_read_records_activation_and_read(kit, store, make_skill) -> None:
    pdf = make_skill("pdf", files={"references/guide.md": "# Guide\nuse pdftotext\n"})
    session, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("skills.load", names=["pdf"])),
            kit.turn(kit.call("skills.read", path="references/guide.md")),
        ],
        [pdf],
    )
    (activated,) = kit.of_type(bodies, SkillActivated)
    assert activated.name == "pdf" and activated.hash == pdf.hash and activated.trigger == "tool"
    assert {f.path for f in activated.files} == {"SKILL.md", "references/guide.md"}
    (read,) = kit.of_type(bodies, ResourceRead)
    assert read.path == "references/guide.md" and read.size == len("# Guide\nuse pdftotext\n")
    load, content = results(bodies)
    receipt = json.loads(load.content)
    assert receipt["active_skills"][0]["digest"] == f"sha256:{pdf.hash}"
    assert content.content == "# Guide\nuse pdftotext\n" and not content.is_error
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    # The body reached the next prompt: it is in the active skills of the state.
    assert session.state.active_names == ("pdf",)


async def test_unknown_skill_and_tool_are_readable_errors(kit, store, make_skill) -> None:
    _, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("skills.load", names=["nope"])),
            kit.turn(kit.call("no.such.tool")),
        ],
        [make_skill("pdf")],
    )
    unknown_skill, unknown_tool = results(bodies)
    assert unknown_skill.is_error and unknown_skill.error_type == "unknown_skill"
    assert "available: pdf" in unknown_skill.content
    assert unknown_tool.is_error and unknown_tool.error_type == "unknown_tool"
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


async def test_cap_replace_add_dedupe_and_unload(kit, store, make_skill) -> None:
    skills = [make_skill(n) for n in ("a", "b", "c")]
    _, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("skills.load", names=["a", "b", "c"])),  # over the cap of 2
            kit.turn(kit.call("skills.load", names=["a", "b"])),
            kit.turn(kit.call("skills.load", names=["b"], mode="add")),  # already active: no-op
            kit.turn(kit.call("skills.load", names=["c"])),  # replace: a and b go
            kit.turn(kit.call("skills.unload", names=["c", "a"])),
        ],
        skills,
        max_active_skills=2,
    )
    over, two, again, replace, unload = results(bodies)
    assert over.is_error and over.error_type == "too_many_skills" and "at most 2" in over.content
    assert [s["name"] for s in json.loads(two.content)["active_skills"]] == ["a", "b"]
    assert [s["name"] for s in json.loads(again.content)["active_skills"]] == ["a", "b"]
    assert [s["name"] for s in json.loads(replace.content)["active_skills"]] == ["c"]
    assert json.loads(unload.content) == {"active_skills": [], "not_active": ["a"]}
    assert [a.name for a in kit.of_type(bodies, SkillActivated)] == ["a", "b", "c"]
    assert [(d.name, d.reason) for d in kit.of_type(bodies, SkillDeactivated)] == [
        ("a", "replace"),
        ("b", "replace"),
        ("c", "unload"),
    ]


async def test_read_binary_limits_and_hostile_paths(kit, store, make_skill) -> None:
    blob = bytes(range(256))
    skill = make_skill("pdf", files={"assets/logo.bin": blob, "references/big.md": "x" * 5000})
    hostile = ["../pdf/SKILL.md", "/etc/passwd", "a\x00b", "references\\..\\..\\x", "", "~/x"]
    _, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("skills.read", path="SKILL.md")),  # nothing loaded yet
            kit.turn(kit.call("skills.load", names=["pdf"])),
            kit.turn(kit.call("skills.read", path="assets/logo.bin")),
            kit.turn(kit.call("skills.read", path="references/big.md")),
            kit.turn(kit.call("skills.read", path="references/missing.md")),
            *[kit.turn(kit.call("skills.read", path=p)) for p in hostile],
        ],
        [skill],
        policy=PolicyConfig(read_max_bytes=4096),
    )
    none, _, binary, big, missing, *refused = results(bodies)
    assert none.error_type == "no_active_skill"
    data = json.loads(binary.content)
    assert data["encoding"] == "base64" and base64.b64decode(data["data"]) == blob
    assert big.error_type == "too_large" and "4096" in big.content
    assert missing.error_type == "not_found" and "references/big.md" in missing.content
    assert [r.error_type for r in refused] == ["path_refused"] * len(hostile)
    assert len(kit.of_type(bodies, ResourceRead)) == 1


async def test_nested_reads_need_the_policy_switch(kit, store, make_skill) -> None:
    skill = make_skill("pdf", files={"references/forms/w9.md": "nested"})
    turns = [
        kit.turn(kit.call("skills.load", names=["pdf"])),
        kit.turn(kit.call("skills.read", path="references/forms/w9.md")),
    ]
    _, refused = await run(kit, store, turns, [skill])
    _, allowed = await run(kit, store, turns, [skill], policy=PolicyConfig(nested_paths=True))
    assert results(refused)[1].error_type == "path_refused"
    assert "nested_paths" in results(refused)[1].content
    assert results(allowed)[1].content == "nested"


async def test_bad_arguments_are_reported_with_their_path(kit, store, make_skill) -> None:
    _, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("skills.load", names="pdf")),
            kit.turn({"name": "skills.load", "raw_arguments": "{not json"}),
            kit.turn(kit.call("skills.load", names=["pdf"], extra=1)),
            kit.turn(kit.call("skills.read", path="x" * 70_000)),
        ],
        [make_skill("pdf")],
    )
    wrong_type, not_json, extra, huge = results(bodies)
    assert wrong_type.error_type == "invalid_arguments" and "$.names" in wrong_type.content
    assert not_json.error_type == "invalid_arguments"
    assert extra.error_type == "invalid_arguments" and "extra" in extra.content
    assert huge.error_type == "invalid_arguments" and "limit" in huge.content
    assert len(kit.of_type(bodies, ToolCalled)) == 4


async def test_active_skill_stays_pinned_until_loaded_again(
    kit, store, make_skill, tmp_path
) -> None:
    skill = make_skill("pdf", files={"references/guide.md": "version one\n"})
    guide = tmp_path / "skills" / "pdf" / "references" / "guide.md"

    async def edit() -> str:
        """Edit the skill on disk."""
        guide.write_text("version two\n")
        return "edited"

    from orchestrator._host_tools import HostTool

    _, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("skills.load", names=["pdf"])),
            kit.turn(kit.call("edit")),
            kit.turn(kit.call("skills.read", path="references/guide.md")),
            kit.turn(kit.call("skills.load", names=["pdf"])),
            kit.turn(kit.call("skills.read", path="references/guide.md")),
        ],
        [skill],
        host_tools=[HostTool.from_function(edit, name="edit")],
    )
    _, _, pinned, _, fresh = results(bodies)
    assert pinned.content == "version one\n"
    assert fresh.content == "version two\n"
    (changed,) = kit.of_type(bodies, SkillChanged)
    assert changed.old_hash == skill.hash and changed.new_hash != skill.hash
    first, second = kit.of_type(bodies, SkillActivated)
    assert first.hash == skill.hash and second.hash == changed.new_hash


async def test_user_explicit_activation(kit, store, make_skill) -> None:
    pdf = make_skill("pdf")
    agent = kit.agent([], [pdf, make_skill("other")])
    session = await agent.run(store, "/pdf please extract the tables")
    bodies = await kit.bodies(store, session.id)
    (activated,) = kit.of_type(bodies, SkillActivated)
    assert activated.trigger == "user" and activated.call_id is None
    # Activated before the first prompt was rendered.
    kinds = [type(b).__name__ for b in bodies]
    assert kinds.index("SkillActivated") < kinds.index("PromptRendered")


async def test_file_read_activation(kit, store, make_skill) -> None:
    pdf = make_skill("pdf")
    assert pdf.location is not None
    from orchestrator._host_tools import HostTool

    def Read(path: str) -> str:
        """Read a file."""
        with open(path) as f:
            return f.read()

    _, bodies = await run(
        kit,
        store,
        [kit.turn(kit.call("Read", path=pdf.location))],
        [pdf],
        host_tools=[HostTool.from_function(Read)],
        file_access=True,
    )
    (activated,) = kit.of_type(bodies, SkillActivated)
    assert activated.trigger == "file-read" and activated.name == "pdf"


async def test_inline_skill_tools_exist_only_while_it_is_loaded(kit, store) -> None:
    from orchestrator.skills import InlineSkill

    def lint(path: str) -> str:
        """Lint a file."""
        return f"{path}: 0 issues"

    linting = InlineSkill(
        name="linting", description="Lint code.", body="Use lint.\n", tools=(lint,)
    )
    _, bodies = await run(
        kit,
        store,
        [
            kit.turn(kit.call("lint", path="a.py")),  # not loaded yet: no such tool
            kit.turn(kit.call("skills.load", names=["linting"])),
            kit.turn(kit.call("lint", path="a.py")),
            kit.turn(kit.call("skills.unload", all=True)),
            kit.turn(kit.call("lint", path="a.py")),
        ],
        [linting],  # type: ignore[list-item]
    )
    before, _, during, _, after = results(bodies)
    assert before.error_type == "unknown_tool" and after.error_type == "unknown_tool"
    assert during.content == "a.py: 0 issues" and not during.is_error
    (activated,) = kit.of_type(bodies, SkillActivated)
    assert [t.name for t in activated.tools] == ["lint"]
    assert activated.source == "inline" and activated.hash == linting.to_skill().hash
