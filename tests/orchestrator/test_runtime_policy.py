"""Each policy path through the real loop, with real scripts in the real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator._effects import ApprovalDecision, ApprovalRequest
from orchestrator._events import (
    ApprovalRequested,
    ApprovalResolved,
    PolicyConfig,
    PolicyDenied,
    ScriptExecuted,
    ToolCalled,
    ToolCompleted,
)
from orchestrator._host_tools import HostTool
from orchestrator.skills import Tier

SCRIPT = "import sys\nprint('args', *sys.argv[1:])\nsys.exit(3 if 'fail' in sys.argv else 0)\n"
TOUCH = "import sys\nopen(sys.argv[1], 'w').write('ran')\n"


def results(bodies: list[object]) -> list[ToolCompleted]:
    return [b for b in bodies if isinstance(b, ToolCompleted)]


def approver(answer: bool, seen: list[ApprovalRequest]):  # type: ignore[no-untyped-def]
    async def decide(request: ApprovalRequest) -> ApprovalDecision:
        seen.append(request)
        return ApprovalDecision(approved=answer, decided_by="test")

    return decide


async def session_of(kit, store, skill, turns, **kw):  # type: ignore[no-untyped-def]
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=[skill.name])), *turns], [skill], **kw
    )
    try:
        session = await agent.run(store, "task")
    finally:
        agent.close()
    return await kit.bodies(store, session.id)


def run_call(kit, *args: str, path: str = "scripts/run.py"):  # type: ignore[no-untyped-def]
    return kit.turn(kit.call("skills.run_script", path=path, args=list(args)))


async def test_builtin_scripts_run_sandboxed_without_approval(kit, store, make_skill) -> None:
    skill = make_skill("tool", files={"scripts/run.py": SCRIPT})
    seen: list[ApprovalRequest] = []
    bodies = await session_of(
        kit,
        store,
        skill,
        [run_call(kit, "a b"), run_call(kit, "fail")],
        approver=approver(False, seen),
    )
    ok, failed = kit.of_type(bodies, ScriptExecuted)
    assert (ok.exit_code, ok.sandbox, ok.network) == (0, "bwrap", False)
    assert (failed.exit_code, failed.refused) == (3, None)
    out = json.loads(results(bodies)[1].content)
    assert out["stdout"] == "args a b\n" and out["exit_code"] == 0
    # A non-zero exit is a result for the model to read, not a tool error.
    assert (
        not results(bodies)[2].is_error and json.loads(results(bodies)[2].content)["exit_code"] == 3
    )
    assert seen == [] and not kit.of_type(bodies, ApprovalRequested)


async def test_user_scripts_need_approval_granted(kit, store, make_skill) -> None:
    skill = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    seen: list[ApprovalRequest] = []
    bodies = await session_of(kit, store, skill, [run_call(kit)], approver=approver(True, seen))
    assert [r.tier for r in seen] == ["user"]
    (requested,) = kit.of_type(bodies, ApprovalRequested)
    (resolved,) = kit.of_type(bodies, ApprovalResolved)
    assert requested.call_id == resolved.call_id and resolved.approved
    assert kit.of_type(bodies, ScriptExecuted)[0].exit_code == 0


async def test_denied_approval_means_the_script_never_runs(
    kit, store, make_skill, tmp_path: Path
) -> None:
    skill = make_skill("tool", files={"scripts/run.py": TOUCH}, tier=Tier.USER)
    marker = tmp_path / "marker"
    bodies = await session_of(
        kit,
        store,
        skill,
        [run_call(kit, str(marker))],
        approver=approver(False, []),
        policy=PolicyConfig(sandbox="off"),
    )
    (denied,) = kit.of_type(bodies, PolicyDenied)
    assert denied.rule == "approval" and denied.skill == "tool"
    assert not kit.of_type(bodies, ScriptExecuted) and not marker.exists()
    assert results(bodies)[1].error_type == "policy_denied"


async def test_third_party_needs_approval_and_never_gets_network(kit, store, make_skill) -> None:
    skill = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.THIRD_PARTY)
    seen: list[ApprovalRequest] = []
    bodies = await session_of(
        kit,
        store,
        skill,
        [run_call(kit)],
        approver=approver(True, seen),
        policy=PolicyConfig(approve=(), network=("third-party", "builtin")),
    )
    assert [r.tier for r in seen] == ["third-party"]
    (executed,) = kit.of_type(bodies, ScriptExecuted)
    assert executed.network is False and executed.sandbox == "bwrap"


async def test_missing_sandbox_fails_closed(kit, store, make_skill, tmp_path: Path) -> None:
    skill = make_skill("tool", files={"scripts/run.py": TOUCH})
    marker = tmp_path / "marker"
    bodies = await session_of(
        kit, store, skill, [run_call(kit, str(marker))], bwrap=str(tmp_path / "no-bwrap")
    )
    (executed,) = kit.of_type(bodies, ScriptExecuted)
    assert executed.refused and "bubblewrap" in executed.refused and executed.exit_code is None
    (denied,) = kit.of_type(bodies, PolicyDenied)
    assert denied.rule == "sandbox"
    assert not marker.exists()


async def test_other_refusals_are_not_sandbox_denials(kit, store, make_skill) -> None:
    # The script's own name mentions the sandbox; its refusal (no interpreter) must not
    # be filed as a missing sandbox.
    skill = make_skill("tool", files={"scripts/sandbox-check.txt": "hello"})
    bodies = await session_of(kit, store, skill, [run_call(kit, path="scripts/sandbox-check.txt")])
    (executed,) = kit.of_type(bodies, ScriptExecuted)
    assert executed.refused and "no known interpreter" in executed.refused
    (denied,) = kit.of_type(bodies, PolicyDenied)
    assert denied.rule == "script"


async def test_script_timeout_is_reported_and_the_session_goes_on(kit, store, make_skill) -> None:
    skill = make_skill("tool", files={"scripts/run.py": "import time\ntime.sleep(60)\n"})
    bodies = await session_of(
        kit, store, skill, [run_call(kit)], policy=PolicyConfig(script_timeout_ms=300)
    )
    (executed,) = kit.of_type(bodies, ScriptExecuted)
    assert executed.timed_out and executed.exit_code is None
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


async def test_allowed_tools_is_a_hard_allowlist(kit, store, make_skill) -> None:
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    skill = make_skill(
        "tool",
        files={"scripts/run.py": SCRIPT, "references/r.md": "ref"},
        allowed_tools="Read(references/*) lookup",
    )
    bodies = await session_of(
        kit,
        store,
        skill,
        [
            kit.turn(kit.call("skills.read", path="references/r.md")),
            kit.turn(kit.call("skills.read", path="SKILL.md")),
            run_call(kit),
            kit.turn(kit.call("lookup", q="x")),
            kit.turn(kit.call("skills.unload", all=True)),
            run_call(kit),  # no skill loaded any more: a plain error, not a policy one
        ],
        host_tools=[HostTool.from_function(lookup)],
    )
    _, ref, skill_md, script, looked, _, after = results(bodies)
    assert ref.content == "ref" and looked.content == "x"
    assert skill_md.error_type == script.error_type == "policy_denied"
    assert [d.rule for d in kit.of_type(bodies, PolicyDenied)] == ["allowed-tools"] * 2
    assert after.error_type == "no_active_skill"


async def test_a_refused_host_tool_call_records_the_tools_class(kit, store, make_skill) -> None:
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    skill = make_skill("tool", allowed_tools="Read(references/*)")
    bodies = await session_of(
        kit,
        store,
        skill,
        [kit.turn(kit.call("lookup", q="x"))],
        host_tools=[HostTool.from_function(lookup)],
    )
    (called,) = [b for b in kit.of_type(bodies, ToolCalled) if b.tool == "lookup"]
    (denied,) = kit.of_type(bodies, PolicyDenied)
    assert denied.rule == "allowed-tools"
    assert called.effect == "at-most-once"  # the host tool's class, as its definition says


async def test_host_tool_approval_and_failures(kit, store, make_skill) -> None:
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    seen: list[ApprovalRequest] = []
    agent = kit.agent(
        [kit.turn(kit.call("send", to="a")), kit.turn(kit.call("broken"))],
        [make_skill("x")],
        host_tools=[HostTool.from_function(send), HostTool.from_function(broken)],
        policy=PolicyConfig(approve_host_tools=("send",)),
        approver=approver(False, seen),
    )
    session = await agent.run(store, "task")
    bodies = await kit.bodies(store, session.id)
    sent, failed = results(bodies)
    assert sent.error_type == "policy_denied" and [r.tool for r in seen] == ["send"]
    assert (
        failed.is_error and failed.error_type == "RuntimeError" and "disk on fire" in failed.content
    )
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


async def test_an_org_skills_allowed_tools_preapprove_a_host_tool(kit, store, make_skill) -> None:
    """send_email needs approval by policy; an active org skill lists it, so it runs
    without asking anyone, and the log records who pre-approved it."""
    from orchestrator import HostTool, PolicyConfig
    from orchestrator._events import ApprovalRequested, ApprovalResolved, ToolCompleted
    from orchestrator.skills import Tier

    def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    ops = make_skill("ops", allowed_tools="send_email", tier=Tier.ORG)
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=["ops"])),
         kit.turn(kit.call("send_email", to="a@example.com"))],
        [ops],
        host_tools=[HostTool.from_function(send_email)],
        policy=PolicyConfig(approve_host_tools=("send_email",)),
    )  # fmt: skip
    session = await agent.run(store, "mail")
    assert session.state.status == "ended"
    bodies = await kit.bodies(store, session.id)
    (resolved,) = kit.of_type(bodies, ApprovalResolved)
    assert resolved.decided_by == "allowed-tools of ops (org)" and resolved.approved
    assert len(kit.of_type(bodies, ApprovalRequested)) == 1
    assert kit.of_type(bodies, ToolCompleted)[-1].content == "sent to a@example.com"
