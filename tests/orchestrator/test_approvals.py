"""Durable approvals: requests are events, a session with nobody to answer suspends,
any process decides, and a resume continues; decisions are never asked twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from orchestrator import (
    Agent,
    ApprovalDecision,
    ApprovalError,
    ApprovalRequest,
    ApproverError,
    HostTool,
    PolicyConfig,
    ToolContext,
    decide_approval,
    pending_approvals,
)
from orchestrator._events import (
    ApprovalRequested,
    ApprovalResolved,
    PolicyDenied,
    SessionSuspended,
    ToolCalled,
    ToolCompleted,
)
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel

SENT: list[str] = []


def send_email(to: str, context: ToolContext) -> str:
    """Send an email."""
    SENT.append(context.call_id)
    return f"sent to {to}"


def email_agent(kit, **kw):  # type: ignore[no-untyped-def]
    """A fresh agent (as a new process would build), whose scripted model continues
    from the session's history."""
    turns = [kit.turn(kit.call("send_email", to="a@example.com")), {"text": "done"}]
    return Agent(
        model=ScriptedModel(turns, follow_history=True),
        model_name="m",
        host_tools=[HostTool.from_function(send_email)],
        policy=PolicyConfig(approve_host_tools=("send_email",), **kw.pop("policy", {})),
        **kw,
    )


async def test_without_an_approver_the_session_suspends_and_any_process_decides(kit, store) -> None:
    SENT.clear()
    session = await email_agent(kit).run(store, "mail", session_id="s")
    assert session.state.status == "awaiting_approval"
    bodies = await kit.bodies(store, "s")
    assert [type(b) for b in bodies[-3:]] == [ToolCalled, ApprovalRequested, SessionSuspended]
    assert not SENT  # nothing with an effect ran
    (pending,) = await pending_approvals(store)
    assert (pending.session_id, pending.tool, pending.arguments) == (
        "s",
        "send_email",
        '{"to":"a@example.com"}',
    )
    # Resuming with still nobody to ask changes nothing and writes nothing.
    length = len(bodies)
    again = await email_agent(kit).resume(store, "s")
    assert again.state.status == "awaiting_approval" and len(await kit.bodies(store, "s")) == length

    decision = await decide_approval(
        store, "s", pending.call_id, approved=True, decided_by="alice", reason="ok"
    )
    assert decision.decided_by == "alice"
    with pytest.raises(ApprovalError, match="already approved by alice"):
        await decide_approval(store, "s", pending.call_id, approved=False, decided_by="bob")
    with pytest.raises(ApprovalError, match="no pending approval request"):
        await decide_approval(store, "s", "nosuch", approved=True, decided_by="bob")
    assert await pending_approvals(store) == []

    done = await email_agent(kit).resume(store, "s")
    assert done.state.status == "ended" and [pending.call_id] == SENT
    bodies = await kit.bodies(store, "s")
    assert kit.of_type(bodies, ToolCompleted)[0].content == "sent to a@example.com"
    assert (await verdict(store)).ok
    with pytest.raises(ApprovalError, match="has ended"):
        await decide_approval(store, "s", pending.call_id, approved=True, decided_by="bob")


async def test_a_denial_from_outside_is_a_policy_denial(kit, store) -> None:
    SENT.clear()
    await email_agent(kit).run(store, "mail", session_id="s")
    (pending,) = await pending_approvals(store)
    await decide_approval(store, "s", pending.call_id, approved=False, decided_by="carol")
    await email_agent(kit).resume(store, "s")
    bodies = await kit.bodies(store, "s")
    denied = kit.of_type(bodies, PolicyDenied)
    assert denied[0].rule == "approval" and "carol" in denied[0].reason
    assert not SENT


async def test_an_approver_may_answer_later(kit, store) -> None:
    asked: list[ApprovalRequest] = []

    async def later(request: ApprovalRequest) -> ApprovalDecision | None:
        asked.append(request)
        return None

    session = await email_agent(kit, approver=later).run(store, "mail", session_id="s")
    assert session.state.status == "awaiting_approval"
    assert asked[0].action.startswith("call send_email") and asked[0].tool == "send_email"


async def test_requests_expire_as_denials(kit, store) -> None:
    now = [1_000_000_000]

    def clock() -> int:
        return now[0]

    agent = email_agent(kit, policy={"approval_timeout_ms": 1000}, clock=clock)
    await agent.run(store, "mail", session_id="s")
    (pending,) = await pending_approvals(store)
    assert pending.expires_at == 1_000_000_000 + 1_000_000_000
    now[0] += 2_000_000_000
    with pytest.raises(ApprovalError, match="expired"):
        await decide_approval(
            store, "s", pending.call_id, approved=True, decided_by="late", clock=clock
        )
    resolved = kit.of_type(await kit.bodies(store, "s"), ApprovalResolved)
    assert [(r.approved, r.decided_by) for r in resolved] == [(False, "expired")]


async def test_an_in_process_approver_past_the_expiry_is_not_waited_for(
    kit, store, autojump_clock
) -> None:
    async def slow(request: ApprovalRequest) -> ApprovalDecision:
        await trio.sleep(3600)
        return ApprovalDecision(approved=True, decided_by="too late")

    agent = email_agent(kit, approver=slow, policy={"approval_timeout_ms": 50})
    agent.clock = lambda: int(trio.current_time() * 1e9)
    session = await agent.run(store, "mail", session_id="s")
    assert session.state.status == "ended"
    resolved = kit.of_type(await kit.bodies(store, "s"), ApprovalResolved)
    assert [(r.approved, r.decided_by) for r in resolved] == [(False, "expired")]


def test_requested_in_one_process_granted_in_another_continued_in_a_third(
    tmp_path: Path, kit
) -> None:
    def skillog(*args: str | Path, cwd: Path):  # type: ignore[no-untyped-def]
        return kit.skillog(*args, cwd=cwd, env={"USER": "auditor"})

    skill = tmp_path / "skills" / "tidy"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: tidy\ndescription: Tidy up.\n---\nTidy.\n")
    (skill / "scripts" / "tidy.sh").write_text("echo tidied\n")
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [tidy]}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {path: scripts/tidy.sh}}]\n"
        "  - text: all tidy\n"
    )
    db = tmp_path / "log.db"
    # 1: a user-tier script needs approval; no terminal, so the session suspends.
    first = skillog(
        "run", "tidy up", "--model", f"scripted:{script}", "--skills", skill,
        "--db", db, cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "waiting for approval" in first.stdout
    listed = skillog("approvals", "--db", db, "--json", cwd=tmp_path)
    (pending,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert pending["tool"] == "skills.run_script" and pending["tier"] == "user"
    # 2: another process approves it.
    second = skillog("approve", pending["session_id"], pending["call_id"], "--db", db, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "approved" in second.stdout and "auditor" in second.stdout
    again = skillog("approve", pending["session_id"], pending["call_id"], "--db", db, cwd=tmp_path)
    assert again.returncode == 2 and "already approved" in again.stderr
    # 3: a third one resumes it (the scripted model continues where the log stops).
    third = skillog("resume", pending["session_id"], "--db", db, cwd=tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "approved by auditor" in third.stdout and "all tidy" in third.stdout
    check = skillog("log", "verify", "--db", db, cwd=tmp_path)
    assert check.returncode == 0, check.stdout


async def test_a_broken_approver_is_one_plain_error_and_the_session_stays_resumable(
    kit, store
) -> None:
    async def typo(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approve=True, decided_by="me")  # type: ignore[call-arg]

    with pytest.raises(ApproverError, match=r"the approver raised TypeError: .*'approve'"):
        await email_agent(kit, approver=typo).run(store, "mail", session_id="s")
    assert len(await pending_approvals(store)) == 1  # recorded, still pending

    async def fixed(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, decided_by="me")

    done = await email_agent(kit, approver=fixed).resume(store, "s")
    assert done.state.status == "ended"
