"""Approvals by what an action does, not only by who wrote it (issue 29): destructive
tools and scripts given network ask under every tier, scripts can be turned off, a
third-party skill gets network only by name, and denials are remembered too."""

from __future__ import annotations

import json

import pytest

from orchestrator import ApprovalDecision, ApprovalRequest, HostTool, PolicyConfig
from orchestrator._events import (
    ApprovalRemembered,
    ApprovalResolved,
    McpToolDef,
    PolicyDenied,
    PolicyOverride,
    SessionStarted,
    ToolCompleted,
    ToolDef,
)
from orchestrator._policy import asks_for_what_it_does, destructive_mcp, skill_settings
from orchestrator.skills import Tier

SCRIPT = "import sys\nprint('ran', *sys.argv[1:])\n"


def recording(asked: list[ApprovalRequest], approved: bool = True, remember: str | None = None):  # type: ignore[no-untyped-def]
    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=approved, decided_by="ann", remember=remember)

    return approve


async def session(kit, store, skills, turns, approver, policy, **kw):  # type: ignore[no-untyped-def]
    names = [s.name for s in skills]
    load = [kit.turn(kit.call("skills.load", names=names))] if names else []
    agent = kit.agent([*load, *turns], skills, approver=approver, policy=policy, **kw)
    try:
        await agent.run(store, "task", session_id="s")
    finally:
        agent.close()
    return await kit.bodies(store, "s")


def wipe(path: str) -> str:
    """Delete everything at path."""
    return f"wiped {path}"


def look(path: str) -> str:
    """Look at path."""
    return f"saw {path}"


async def test_a_destructive_host_tool_asks_even_when_a_builtin_skill_lists_it(
    kit, store, make_skill
) -> None:
    ops = make_skill("ops", allowed_tools="wipe look", tier=Tier.BUILTIN)
    tools = [HostTool.from_function(wipe, destructive=True), HostTool.from_function(look)]
    asked: list[ApprovalRequest] = []
    policy = PolicyConfig(approve_host_tools=("*",))
    turns = [
        kit.turn(kit.call("wipe", path="/srv")),
        kit.turn(kit.call("look", path="/srv")),
    ]
    bodies = await session(kit, store, [ops], turns, recording(asked), policy, host_tools=tools)
    # look is pre-approved by the builtin skill's allowed-tools; wipe is asked about.
    assert [r.tool for r in asked] == ["wipe"]
    assert asked[0].action == 'call wipe with {"path":"/srv"} (declared destructive)'
    resolved = kit.of_type(bodies, ApprovalResolved)
    assert [r.decided_by for r in resolved] == ["ann", "allowed-tools of ops (builtin)"]
    started = kit.of_type(bodies, SessionStarted)[0]
    (wipe_def,) = [t for t in started.host_tools if t.name == "wipe"]
    assert wipe_def.destructive


async def test_an_allow_rule_answers_for_a_destructive_tool(kit, store) -> None:
    tools = [HostTool.from_function(wipe, destructive=True)]
    asked: list[ApprovalRequest] = []
    policy = PolicyConfig(allow=("wipe",))
    turns = [kit.turn(kit.call("wipe", path="/tmp/x"))]
    bodies = await session(kit, store, [], turns, recording(asked), policy, host_tools=tools)
    assert asked == []
    (resolved,) = kit.of_type(bodies, ApprovalResolved)
    assert resolved.approved and resolved.decided_by == "policy allow wipe"


def test_mcp_annotations_and_effect_classes_decide_what_asks() -> None:
    assert destructive_mcp('{"destructiveHint":true}')
    assert not destructive_mcp('{"destructiveHint":true,"readOnlyHint":true}')
    assert not destructive_mcp('{"readOnlyHint":false}')
    assert not destructive_mcp("") and not destructive_mcp("not json")

    def mcp(annotations: str) -> McpToolDef:
        return McpToolDef(
            name="mcp__fs__rm",
            description="rm",
            input_schema="{}",
            server="fs",
            mcp_name="rm",
            annotations=annotations,
        )

    policy = PolicyConfig()
    assert asks_for_what_it_does(policy, mcp('{"destructiveHint":true}')) == (
        "annotated destructiveHint"
    )
    assert asks_for_what_it_does(policy, mcp('{"readOnlyHint":true}')) is None
    off = PolicyConfig(ask_destructive=False)
    assert asks_for_what_it_does(off, mcp('{"destructiveHint":true}')) is None
    plain = ToolDef(name="send", description="send", input_schema="{}")
    assert asks_for_what_it_does(policy, plain) is None
    by_effect = PolicyConfig(approve_effects=("at-most-once",))
    assert asks_for_what_it_does(by_effect, plain) == "its effect class is at-most-once"


async def test_scripts_off_refuses_clearly(kit, store, make_skill) -> None:
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.BUILTIN)
    turns = [kit.turn(kit.call("skills.run_script", skill="tool", path="scripts/run.py"))]
    policy = PolicyConfig(scripts="off", sandbox="preferred")
    bodies = await session(kit, store, [tool], turns, None, policy)
    (denied,) = kit.of_type(bodies, PolicyDenied)
    assert denied.rule == "scripts: off"
    result = kit.of_type(bodies, ToolCompleted)[-1]
    assert result.is_error and "policy scripts: off" in result.content


async def test_a_trusted_script_given_network_asks_unless_a_rule_allows_it(
    kit, store, make_skill
) -> None:
    tool = make_skill(
        "tool",
        files={"scripts/run.py": SCRIPT},
        tier=Tier.BUILTIN,
        allowed_tools="Bash(scripts/run.py:*)",
    )
    call = kit.turn(kit.call("skills.run_script", skill="tool", path="scripts/run.py"))
    asked: list[ApprovalRequest] = []
    networked = PolicyConfig(network=("builtin",), sandbox="preferred")
    await session(kit, store, [tool], [call], recording(asked, approved=False), networked)
    # Builtin scripts need no approval, and its allowed-tools list the script: with
    # network it asks all the same.
    assert [r.action for r in asked] == ["run scripts/run.py (with network)"]
    asked.clear()
    allowed = PolicyConfig(
        network=("builtin",), sandbox="preferred", allow=("Bash(scripts/run.py:*)",)
    )
    other = type(store)()
    bodies = await session(kit, other, [tool], [call], recording(asked), allowed)
    assert asked == []
    (resolved,) = kit.of_type(bodies, ApprovalResolved)
    assert resolved.decided_by == "policy allow Bash(scripts/run.py:*)"


async def test_third_party_network_only_by_name_with_a_warning(kit, store) -> None:
    by_tier = PolicyConfig(tiers={"third-party": PolicyOverride(network=True)})
    assert not skill_settings(by_tier, "third-party", name="fetch").network
    by_name = PolicyConfig(skills={"fetch": PolicyOverride(network=True)})
    settings = skill_settings(by_name, "third-party", name="fetch")
    assert settings.network and settings.approve and settings.sandbox == "required"
    bodies = await session(kit, store, [], [], None, by_name)
    (started,) = kit.of_type(bodies, SessionStarted)
    assert started.warnings == (
        "policy gives network to the scripts of skill 'fetch', even if it is third-party "
        "(each run still asks)",
    )


@pytest.mark.parametrize("remember", ["skill", "pattern:Bash(scripts/run.py:*)"])
async def test_a_remembered_denial_refuses_the_next_calls_unasked(
    kit, store, make_skill, remember: str
) -> None:
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    turns = [
        kit.turn(kit.call("skills.run_script", skill="tool", path="scripts/run.py", args=[n]))
        for n in ("1", "2")
    ]
    asked: list[ApprovalRequest] = []
    policy = PolicyConfig(sandbox="preferred")
    approver = recording(asked, approved=False, remember=remember)
    bodies = await session(kit, store, [tool], turns, approver, policy)
    assert [r.args for r in asked] == [("1",)]
    (denial,) = kit.of_type(bodies, ApprovalRemembered)
    assert not denial.approved
    first, second = kit.of_type(bodies, ApprovalResolved)
    assert not first.approved and first.decided_by == "ann"
    assert not second.approved and second.decided_by.startswith("remembered denial: ")
    results = [r for r in kit.of_type(bodies, ToolCompleted) if r.tool == "skills.run_script"]
    assert all(r.is_error for r in results) and json.dumps([r.content for r in results])
