"""Toolsets from skill folders (seed 003 PL1): a skill's ``tools.yaml`` declares tools
backed by its own scripts, offered while it is active, arguments validated against the
declared schema (hostile ones refused before anything runs), run through the same
sandboxed, approved, recorded script path as ``skills.run_script``; replay and re-drive
reproduce them from the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eventlog import open_sqlite_store
from orchestrator import Agent, PolicyConfig
from orchestrator._events import (
    ApprovalRequested,
    ScriptExecuted,
    ScriptStarted,
    SkillActivated,
    SkillActivationFailed,
    ToolCompleted,
)
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel
from orchestrator.scripts import sandbox_available
from orchestrator.skills import Skill, Tier, ToolsetError, load_skill, parse_toolset
from replay import load_recording, redrive, replay_session

TOOLS = """\
tools:
  - name: echo
    description: Echo the text n times.
    script: scripts/echo.py
    input_schema:
      type: object
      properties:
        text: {type: string, maxLength: 100}
        n: {type: integer, minimum: 1, maximum: 3}
      required: [text]
      additionalProperties: false
"""
ECHO = (
    "import json, sys\na = json.loads(sys.argv[1])\nprint(' '.join([a['text']] * a.get('n', 1)))\n"
)


def write(root: Path, tools: str = TOOLS, name: str = "tab") -> Path:
    d = root / name
    (d / "scripts").mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Echoes.\n---\nUse the tool.\n")
    (d / "scripts" / "echo.py").write_text(ECHO)
    (d / "tools.yaml").write_text(tools)
    return d


def agent(kit: Any, skill: Skill, *calls: dict[str, Any]) -> Agent:
    turns = [kit.turn(kit.call("skills.load", names=[skill.name]))]
    turns += [kit.turn(c) for c in calls]
    sandbox = "required" if sandbox_available() else "preferred"
    return Agent(
        model=ScriptedModel([*turns, {"text": "done"}], follow_history=True),
        model_name="m",
        skills=[skill],
        policy=PolicyConfig(sandbox=sandbox),
    )


HOSTILE: list[tuple[Any, str]] = [
    ({"text": 5}, "is not of type 'string' - at `$.text`"),
    ({"text": "a", "extra": 1}, "Additional properties are not allowed"),
    ({"n": 2}, "'text' is a required property"),
    ({"text": "a", "n": 99}, "99 is greater than the maximum of 3 - at `$.n`"),
    ({"text": "x" * 101}, "is too long - at `$.text`"),
    ({"text": "y" * 5000, "n": 1}, " … "),  # the refusal quotes a huge value only in part
    ({"text": "a" * 70_000}, "the limit is 65536"),
]


async def test_a_declared_tool_runs_its_script_and_hostile_arguments_never_do(
    kit: Any, tmp_path: Path
) -> None:
    skill = load_skill(write(tmp_path / "skills"), tier=Tier.BUILTIN, source="t")
    calls = [kit.call("tab__echo", text="hi", n=2)]
    calls += [kit.call("tab__echo", **args) for args, _ in HOSTILE]
    # Data that looks like flags or shell is only data: one argv element of JSON.
    calls.append(kit.call("tab__echo", text="--help; rm -rf / $(id)"))
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        a = agent(kit, skill, *calls)
        try:
            await a.run(store, "echo", session_id="s")
        finally:
            a.close()
        bodies = await kit.bodies(store, "s")
        assert (await verdict(store)).ok
    (activated,) = kit.of_type(bodies, SkillActivated)
    assert [(t.name, t.script) for t in activated.tools] == [("tab__echo", "scripts/echo.py")]
    results = [t for t in kit.of_type(bodies, ToolCompleted) if t.tool == "tab__echo"]
    assert not results[0].is_error and "hi hi" in results[0].content
    for (_, says), result in zip(HOSTILE, results[1:-1], strict=True):
        assert result.is_error and result.error_type == "invalid_arguments", result.content
        assert says in result.content and len(result.content) < 500, result.content
    assert not results[-1].is_error and "--help; rm -rf / $(id)" in results[-1].content
    started = kit.of_type(bodies, ScriptStarted)
    ran = kit.of_type(bodies, ScriptExecuted)
    assert len(started) == len(ran) == 2  # only the two valid calls ran anything
    assert ran[0].path == "scripts/echo.py" and json.loads(ran[0].args[0]) == {"text": "hi", "n": 2}
    assert ran[0].args == ('{"n":2,"text":"hi"}',)  # canonical JSON

    async with open_sqlite_store(db, readonly=True) as store:
        recording = await load_recording(store, "s")
        assert (await replay_session(store, recording)).ok
        report = await redrive(store, recording)
        assert report.ok and report.complete, report


async def test_the_tools_are_offered_only_while_the_skill_is_active_and_ask_like_its_scripts(
    kit: Any, store: Any, tmp_path: Path
) -> None:
    skill = load_skill(write(tmp_path / "skills"), tier=Tier.USER, source="t")
    before = kit.call("tab__echo", text="early")
    turns = [
        kit.turn(before),
        kit.turn(kit.call("skills.load", names=["tab"])),
        kit.turn(kit.call("tab__echo", text="hi")),
    ]
    a = Agent(
        model=ScriptedModel([*turns, {"text": "done"}], follow_history=True),
        model_name="m",
        skills=[skill],
    )
    session = await a.run(store, "echo", session_id="u")
    a.close()
    bodies = await kit.bodies(store, "u")
    early = kit.of_type(bodies, ToolCompleted)[0]
    assert early.is_error and early.error_type == "unknown_tool"
    # A user skill's script asks: so does its tool, naming the script and the arguments.
    assert session.state.status == "awaiting_approval"
    (asked,) = kit.of_type(bodies, ApprovalRequested)
    assert asked.tool == "tab__echo" and asked.action == 'run scripts/echo.py {"text":"hi"}'


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ("tools: [{name: x, description: d, script: scripts/nope.py}]", "not a file of the skill"),
        ("tools: [{name: Bad Name, description: d, script: scripts/echo.py}]", "lowercase"),
        (
            "tools: [{name: x, description: d, script: scripts/echo.py,"
            " input_schema: {type: array}}]",
            'type "object"',
        ),
        (
            "tools: [{name: x, description: d, script: scripts/echo.py,"
            " input_schema: {type: object, properties: {a: {type: 5}}}}]",
            "not a valid JSON Schema",
        ),
        ("tools: [{name: x, description: d, script: scripts/echo.py, shell: true}]", "shell"),
        ("tools: {", "not UTF-8 YAML"),
    ],
)
def test_a_bad_tools_file_says_what_to_fix(tools: str, says: str) -> None:
    with pytest.raises(ToolsetError, match=says):
        parse_toolset(
            "tab", {"SKILL.md": b"", "scripts/echo.py": b"", "tools.yaml": tools.encode()}
        )


async def test_a_bad_tools_file_fails_the_activation_with_the_reason(
    kit: Any, store: Any, tmp_path: Path
) -> None:
    bad = "tools: [{name: x, description: d, script: scripts/nope.py}]"
    skill = load_skill(write(tmp_path / "skills", tools=bad), tier=Tier.BUILTIN, source="t")
    a = agent(kit, skill)
    await a.run(store, "echo", session_id="b")
    a.close()
    (failed,) = kit.of_type(await kit.bodies(store, "b"), SkillActivationFailed)
    assert "tab/tools.yaml" in failed.reason and "not a file of the skill" in failed.reason
