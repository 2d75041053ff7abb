"""Approvals by action, remembered when the user says so: a grant is an event, covers
exactly what it says (never more), is honoured on resume in a new process and on
replay, and replay reproduces the prompts byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from eventlog import MemoryStore, open_sqlite_store, verify
from orchestrator import (
    ApprovalDecision,
    ApprovalRequest,
    ApproverError,
    HostTool,
    PolicyConfig,
    ToolContext,
    decide_approval,
    pending_approvals,
)
from orchestrator._events import (
    CODEC,
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    ScriptExecuted,
    SessionSuspended,
)
from orchestrator._policy import grant_covers, remembered_grant
from orchestrator.skills import Tier
from replay import load_recording, redrive, replay_session

SCRIPT = "import sys\nprint('ran', *sys.argv[1:])\n"
POLICY = PolicyConfig(sandbox="preferred")


def run(kit, skill: str, *args: str, path: str = "scripts/run.py"):  # type: ignore[no-untyped-def]
    return kit.turn(kit.call("skills.run_script", skill=skill, path=path, args=list(args)))


def answering(remember: str | None, asked: list[ApprovalRequest]):  # type: ignore[no-untyped-def]
    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, decided_by="ann", remember=remember)

    return approve


async def session(kit, store, skills, turns, approver, **kw):  # type: ignore[no-untyped-def]
    names = [s.name for s in skills]
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=names, mode="add")), *turns],
        skills,
        approver=approver,
        policy=kw.pop("policy", POLICY),
        **kw,
    )
    try:
        done = await agent.run(store, "task", session_id="s")
    finally:
        agent.close()
    return done, await kit.bodies(store, "s")


async def test_always_for_this_skill_skips_its_next_calls_not_another_skills(
    kit, store, make_skill
) -> None:
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    other = make_skill("other", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    asked: list[ApprovalRequest] = []
    turns = [run(kit, "tool", "1"), run(kit, "tool", "2"), run(kit, "other", "3")]
    _, bodies = await session(kit, store, [tool, other], turns, answering("skill", asked))
    # Asked once for tool (and remembered), once for other; tool's second call was not.
    assert [(r.skill, r.args) for r in asked] == [("tool", ("1",)), ("other", ("3",))]
    first = asked[0]
    assert (first.tool, first.path, first.tier, first.skill_hash) == (
        "skills.run_script",
        "scripts/run.py",
        "user",
        tool.hash,
    )
    grants = kit.of_type(bodies, ApprovalRemembered)
    assert [(g.scope, g.skill, g.skill_hash, g.decided_by) for g in grants] == [
        ("skill", "tool", tool.hash, "ann"),
        ("skill", "other", other.hash, "ann"),
    ]
    decided = [r.decided_by for r in kit.of_type(bodies, ApprovalResolved)]
    assert decided == ["ann", "remembered: every call of tool (by ann)", "ann"]
    assert len(kit.of_type(bodies, ScriptExecuted)) == 3
    # The grant is committed with its decision, in one transaction, right after it.
    i = next(i for i, b in enumerate(bodies) if isinstance(b, ApprovalRemembered))
    assert (
        isinstance(bodies[i - 1], ApprovalResolved) and bodies[i - 1].call_id == grants[0].call_id
    )


async def test_a_pattern_grant_covers_what_it_matches_and_nothing_else(
    kit, store, make_skill
) -> None:
    tool = make_skill(
        "tool", files={"scripts/run.py": SCRIPT, "scripts/other.py": SCRIPT}, tier=Tier.USER
    )
    asked: list[ApprovalRequest] = []
    rule = "pattern:Bash(python3 scripts/run.py --dry:*)"
    turns = [
        run(kit, "tool", "--dry", "a"),
        run(kit, "tool", "--dry", "b"),  # covered
        run(kit, "tool", "--dry-run"),  # not: the prefix ends at a word
        run(kit, "tool", "--dry", path="scripts/other.py"),  # not: another script
    ]
    remember = iter([rule, None, None])

    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, decided_by="ann", remember=next(remember))

    _, bodies = await session(kit, store, [tool], turns, approve)
    assert [(r.path, r.args) for r in asked] == [
        ("scripts/run.py", ("--dry", "a")),
        ("scripts/run.py", ("--dry-run",)),
        ("scripts/other.py", ("--dry",)),
    ]
    (grant,) = kit.of_type(bodies, ApprovalRemembered)
    assert (grant.scope, grant.pattern) == ("pattern", "Bash(python3 scripts/run.py --dry:*)")


async def test_a_grant_given_in_a_turn_applies_from_the_next_turn(kit, store, make_skill) -> None:
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    asked: list[ApprovalRequest] = []
    both = kit.turn(
        kit.call("skills.run_script", skill="tool", path="scripts/run.py", args=["1"]),
        kit.call("skills.run_script", skill="tool", path="scripts/run.py", args=["2"]),
    )
    _, bodies = await session(
        kit, store, [tool], [both, run(kit, "tool", "3")], answering("skill", asked)
    )
    # The two calls of one response were planned together: both asked, whatever the
    # timing; the next turn's call is covered. The same log gives the same plans.
    assert sorted(r.args for r in asked) == [("1",), ("2",)]
    assert kit.of_type(bodies, ApprovalResolved)[-1].decided_by.startswith("remembered:")


async def test_host_tool_grants_cover_host_tools_only(kit, store, make_skill) -> None:
    sent: list[str] = []

    def send(to: str, context: ToolContext) -> str:
        """Send."""
        sent.append(to)
        return "ok"

    asked: list[ApprovalRequest] = []
    turns = [
        kit.turn(kit.call("send", to="a")),
        kit.turn(kit.call("send", to="b")),
    ]
    agent = kit.agent(
        turns,
        host_tools=[HostTool.from_function(send)],
        approver=answering("pattern:send", asked),
        policy=PolicyConfig(approve_host_tools=("send",)),
    )
    await agent.run(store, "task", session_id="s")
    bodies = await kit.bodies(store, "s")
    assert [r.arguments for r in asked] == ['{"to":"a"}'] and sent == ["a", "b"]
    (grant,) = kit.of_type(bodies, ApprovalRemembered)
    assert (grant.skill, grant.pattern) == (None, "send")


async def test_an_approver_asking_to_remember_something_else_is_an_error(
    kit, store, make_skill
) -> None:
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    bad = answering("pattern:Bash(scripts/other.py:*)", [])
    with pytest.raises(ApproverError, match="does not match call"):
        await session(kit, store, [tool], [run(kit, "tool")], bad)
    (pending,) = await pending_approvals(store, "s")  # still pending, nothing recorded
    assert not kit.of_type(await kit.bodies(store, "s"), ApprovalRemembered)
    assert pending.path == "scripts/run.py"


def request(**kw: object) -> ApprovalRequested:
    base: dict[str, object] = {
        "call_id": "c1",
        "tool": "skills.run_script",
        "action": "run scripts/x.py a",
        "skill": "pdf",
        "tier": "user",
        "path": "scripts/x.py",
        "args": ("a",),
        "skill_hash": "h1",
    }
    return ApprovalRequested(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("remember", "message"),
    [
        ("always", "cannot remember 'always'"),
        ("pattern:", "cannot remember"),
        ("pattern:Bash(scripts/x.py:*) Read", "is not one allowed-tools rule"),
        ("pattern:Bash(scripts/x.py:*)Read", "is not one allowed-tools rule"),
        ("pattern:(", "is not one allowed-tools rule"),
        ("pattern:Bash(scripts/y.py:*)", "does not match call c1"),
        ("pattern:Bash(scripts/x.py b:*)", "does not match call c1"),
        ("pattern:Read", "does not match call c1"),
        ("pattern:skills.run_script(scripts/x.py)", "does not match call c1"),
        ("pattern:send_email", "does not match call c1"),
        ("skill:pdf", "cannot remember"),
    ],
)
def test_hostile_or_mistaken_grants_are_refused(remember: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        remembered_grant(remember, request(), "ann")


def test_a_host_tool_call_cannot_be_remembered_for_a_skill() -> None:
    host = request(tool="send", skill=None, tier=None, path=None, args=(), skill_hash=None)
    with pytest.raises(ValueError, match=r"host tool call.*'pattern:send'"):
        remembered_grant("skill", host, "ann")


@pytest.mark.parametrize(
    ("pattern", "call", "covered"),
    [
        ("Bash(scripts/x.py:*)", ("pdf", "h1", "scripts/x.py", ("b", "c")), True),
        ("Bash(scripts/x.py:*)", ("pdf", "h1", "scripts/x.py.evil", ()), False),
        ("Bash(scripts/x.py:*)", ("pdf", "h2", "scripts/x.py", ()), False),  # changed skill
        ("Bash(scripts/x.py:*)", ("evil", "h1", "scripts/x.py", ()), False),  # another skill
        ("Bash(scripts/x.py:*)", (None, None, "scripts/x.py", ()), False),
        ("Bash(scripts/x.py a:*)", ("pdf", "h1", "scripts/x.py", ("a;rm",)), False),
        ("Bash(scripts/x.py a:*)", ("pdf", "h1", "scripts/x.py", ("a b",)), False),
        ("Bash(scripts/x.py a)", ("pdf", "h1", "scripts/x.py", ("a", "b")), False),
        ("Bash(python3 scripts/x.py:*)", ("pdf", "h1", "scripts/x.py", ("a",)), True),
        ("Bash(node scripts/x.py:*)", ("pdf", "h1", "scripts/x.py", ()), False),
    ],
)
def test_a_grant_never_widens(pattern: str, call: tuple, covered: bool) -> None:  # type: ignore[type-arg]
    grant = ApprovalRemembered(
        call_id="c1", scope="pattern", skill="pdf", skill_hash="h1", pattern=pattern
    )
    skill, skill_hash, path, args = call
    found = grant_covers(
        grant, "skills.run_script", skill=skill, skill_hash=skill_hash, path=path, args=args
    )
    assert found is covered
    skill_grant = ApprovalRemembered(call_id="c1", scope="skill", skill="pdf", skill_hash="h1")
    same_skill = (skill, skill_hash) == ("pdf", "h1")
    assert grant_covers(skill_grant, "x", skill=skill, skill_hash=skill_hash) is same_skill


# -- decided from another process, honoured on resume, reproduced by replay -------------


async def test_a_remembered_decision_resolves_the_other_pending_requests_it_covers(
    kit, make_skill
) -> None:
    store = MemoryStore()
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    other = make_skill("other", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    three = kit.turn(
        kit.call("skills.run_script", skill="tool", path="scripts/run.py", args=["1"]),
        kit.call("skills.run_script", skill="tool", path="scripts/run.py", args=["2"]),
        kit.call("skills.run_script", skill="other", path="scripts/run.py"),
    )
    done, _ = await session(kit, store, [tool, other], [three], None)
    assert done.state.status == "awaiting_approval"
    pending = await pending_approvals(store, "s")
    assert len(pending) == 3
    first = next(p for p in pending if p.skill == "tool")
    await decide_approval(
        store, "s", first.call_id, approved=True, decided_by="bo", remember="skill"
    )
    (left,) = await pending_approvals(store, "s")
    assert left.skill == "other"
    # A denial is remembered the same way (issue 29).
    await decide_approval(
        store, "s", left.call_id, approved=False, decided_by="cy", remember="skill"
    )
    bodies = await kit.bodies(store, "s")
    resolved = kit.of_type(bodies, ApprovalResolved)
    assert [(r.approved, r.decided_by) for r in resolved] == [
        (True, "bo"),
        (True, "remembered: every call of tool (by bo)"),
        (False, "cy"),
    ]
    assert [g.approved for g in kit.of_type(bodies, ApprovalRemembered)] == [True, False]


async def read_log(db: Path, sid: str) -> list[Event]:
    async with open_sqlite_store(db, readonly=True) as store:
        return [CODEC.decode(e) async for e in store.read(sid)]


def test_remember_from_the_cli_survives_a_restart_and_replays(tmp_path: Path, kit) -> None:
    def skillog(*args: str | Path, cwd: Path):  # type: ignore[no-untyped-def]
        env = {"SKILLOG_CONFIG": str(cwd / "none.yaml"), "HOME": str(cwd)}
        return kit.skillog(*args, cwd=cwd, env=env)

    for name in ("a", "b"):
        skill = tmp_path / "skills" / name
        (skill / "scripts").mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {name}.\n---\nGo.\n")
        (skill / "scripts" / "go.py").write_text(SCRIPT)
    script = tmp_path / "turns.yaml"
    step = "  - tool_calls: [{{name: skills.run_script, arguments: {{skill: {}, path: scripts/go.py, args: [{}]}}}}]\n"  # noqa: E501
    script.write_text(
        "turns:\n  - tool_calls: [{name: skills.load, arguments: {names: [a, b], mode: add}}]\n"
        + step.format("a", "--x")
        + step.format("a", "--y")
        + step.format("b", "--z")
        + "  - text: all done\n"
    )
    db = tmp_path / "log.db"
    common = ("--skills", tmp_path / "skills", "--db", db, "--policy", "sandbox=preferred")
    first = skillog("run", "go", "--model", f"scripted:{script}", *common, cwd=tmp_path)
    assert first.returncode == 0 and "waiting for approval" in first.stdout, first.stderr
    (pending,) = [json.loads(x) for x in skillog("approvals", "--db", db, "--json", cwd=tmp_path)
                  .stdout.splitlines()]  # fmt: skip
    sid, call = pending["session_id"], pending["call_id"]
    assert (pending["skill"], pending["args"]) == ("a", ["--x"])
    wrong = skillog(
        "approve", sid, call, "--db", db, "--remember", "pattern:Bash(x:*)", cwd=tmp_path
    )
    assert wrong.returncode == 2 and "does not match call" in wrong.stderr
    assert "nothing was written" in wrong.stderr
    ok = skillog(
        "approve", sid, call, "--db", db, "--remember", "pattern:Bash(scripts/go.py:*)",
        cwd=tmp_path,
    )  # fmt: skip
    assert ok.returncode == 0 and "remembered" in ok.stdout, ok.stderr
    # A new process resumes: a's next call is covered by the grant, b's is asked.
    second = skillog("resume", sid, "--db", db, cwd=tmp_path)
    assert second.returncode == 0 and "waiting for approval" in second.stdout, second.stderr
    (pending,) = [json.loads(x) for x in skillog("approvals", "--db", db, "--json", cwd=tmp_path)
                  .stdout.splitlines()]  # fmt: skip
    assert (pending["skill"], pending["args"]) == ("b", ["--z"])
    assert skillog("approve", sid, pending["call_id"], "--db", db, cwd=tmp_path).returncode == 0
    third = skillog("resume", sid, "--db", db, cwd=tmp_path)
    assert third.returncode == 0 and "all done" in third.stdout, third.stderr

    bodies = trio.run(read_log, db, sid)
    resolved = [b.decided_by for b in bodies if isinstance(b, ApprovalResolved)]
    assert resolved[1] == "remembered: Bash(scripts/go.py:*) (by " + resolved[0] + ")"
    assert sum(isinstance(b, SessionSuspended) for b in bodies) == 2
    assert [b.args for b in bodies if isinstance(b, ScriptExecuted)] == [
        ("--x",),
        ("--y",),
        ("--z",),
    ]
    # Replay proves every prompt byte for byte and re-drive reproduces every event.
    replayed = skillog("replay", sid, "--db", db, "--redrive", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "every request reproduced byte for byte" in replayed.stdout
    assert "re-drive: the current code reproduces all" in replayed.stdout


async def test_replay_of_an_in_process_remembered_session(kit, store, make_skill) -> None:
    tool = make_skill("tool", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    turns = [run(kit, "tool", "1"), run(kit, "tool", "2")]
    await session(kit, store, [tool], turns, answering("skill", []))
    recording = await load_recording(store, "s")
    assert (await replay_session(store, recording)).ok
    report = await redrive(store, recording)
    assert report.divergence is None and report.compared == report.recorded_events
    assert (await verify(store)).ok
