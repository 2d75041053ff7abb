"""Written for Claude Code, working unchanged: a real skill of the corpus with the
``allowed-tools`` line Claude Code's docs show, and a configuration whose policy
``allow`` list is copied from a Claude Code settings file's ``permissions.allow``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trio

from eventlog import open_sqlite_store
from orchestrator import ApprovalDecision, ApprovalRequest, PolicyConfig
from orchestrator._events import (
    CODEC,
    ApprovalResolved,
    Event,
    PolicyDenied,
    ScriptExecuted,
    SessionSuspended,
)
from orchestrator._streams import is_session_stream
from orchestrator.skills import Tier, load_skill

CLAUDE_ALLOWED_TOOLS = "Bash(python:*) Read"
"""As in Claude Code's skills documentation: run the skill's Python scripts, read files."""

CLAUDE_SETTINGS_ALLOW = """\
policy:
  # copied from .claude/settings.json "permissions": {"allow": [...]}
  allow:
    - "Bash(python:*)"
    - "Bash(npm run test:*)"
    - "Read"
    - "WebFetch(domain:docs.example.com)"
"""

USAGE = (
    "import sys\nprint('usage: with_server.py --server CMD --port N -- COMMAND', sys.argv[1:])\n"
)


def webapp_testing(corpus: Path, root: Path) -> Path:
    """The corpus's webapp-testing skill, with Claude Code's allowed-tools line added to
    its frontmatter and a stand-in for the helper script it documents."""
    text = (corpus / "anthropics-skills" / "webapp-testing" / "SKILL.md").read_text()
    front_end = text.index("\n---", 4)
    text = text[:front_end] + f"\nallowed-tools: {CLAUDE_ALLOWED_TOOLS}" + text[front_end:]
    skill = root / "webapp-testing"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(text)
    (skill / "scripts" / "with_server.py").write_text(USAGE)
    (skill / "scripts" / "cleanup.sh").write_text("echo cleaned\n")
    return skill


async def test_the_skills_allowed_tools_pre_approve_its_python_scripts(
    kit, store, corpus: Path, tmp_path: Path
) -> None:
    skill = load_skill(webapp_testing(corpus, tmp_path), tier=Tier.USER, source="corpus")
    assert skill.properties.allowed_tools == CLAUDE_ALLOWED_TOOLS
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, decided_by="me")

    turns = [
        kit.turn(kit.call("skills.load", names=["webapp-testing"])),
        kit.turn(kit.call("skills.run_script", path="scripts/with_server.py", args=["--help"])),
        kit.turn(kit.call("skills.run_script", path="scripts/cleanup.sh")),
    ]
    policy = PolicyConfig(preapprove_tiers=("builtin", "org", "user"), sandbox="preferred")
    agent = kit.agent(turns, [skill], policy=policy, approver=approver)
    session = await agent.run(store, "test the app")
    agent.close()
    bodies = await kit.bodies(store, session.id)
    (resolved,) = kit.of_type(bodies, ApprovalResolved)
    assert resolved.decided_by == "allowed-tools of webapp-testing (user)" and not asked
    (ran,) = kit.of_type(bodies, ScriptExecuted)
    assert (ran.path, ran.exit_code) == ("scripts/with_server.py", 0)
    (denied,) = kit.of_type(bodies, PolicyDenied)  # not Python: the list does not allow it
    assert denied.rule == "allowed-tools"


def test_a_claude_code_permissions_list_in_the_config_works_unchanged(
    corpus: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    webapp_testing(corpus, skills)
    config = tmp_path / "config.yaml"
    config.write_text(CLAUDE_SETTINGS_ALLOW)
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [webapp-testing]}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: "
        "{path: scripts/with_server.py, args: [--help]}}]\n"
        "  - text: tested\n"
    )
    db = tmp_path / "log.db"
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", "test the app",
         "--model", f"scripted:{script}", "--skills", str(skills), "--db", str(db),
         "--policy", "sandbox=preferred"],
        capture_output=True, text=True, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "waiting for approval" not in out.stdout and "tested" in out.stdout

    async def read() -> list[Event]:
        async with open_sqlite_store(db, readonly=True) as store:
            (info,) = [i for i in await store.streams() if is_session_stream(i.stream)]
            return [CODEC.decode(e) async for e in store.read(info.stream)]

    bodies = trio.run(read)
    resolved = [b for b in bodies if isinstance(b, ApprovalResolved)]
    assert [r.decided_by for r in resolved] == ["policy allow Bash(python:*)"]
    assert not any(isinstance(b, SessionSuspended) for b in bodies)
    assert bodies[0].policy.allow[0] == "Bash(python:*)"  # type: ignore[attr-defined]
