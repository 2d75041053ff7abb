"""Lazy install (``policy.lazy_install: ask``): a script of a skill whose ``python:``
requirements have no environment asks once to install them (the approval says what),
through the durable approval path any process can answer; the environment is built
with network for the installer only, recorded as ``skill.env_built`` in the session
before the script runs; replay and re-drive reproduce it without installing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eventlog import open_sqlite_store
from orchestrator import (
    Agent,
    PolicyConfig,
    decide_approval,
    pending_approvals,
)
from orchestrator._events import (
    ApprovalRequested,
    ApprovalResolved,
    PolicyDenied,
    ScriptExecuted,
    SkillEnvBuilt,
    ToolCompleted,
)
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel
from orchestrator.scripts import sandbox_available
from orchestrator.skills import (
    SkillSource,
    Status,
    Tier,
    build_catalog,
    build_env,
    env_state,
    load_skill,
)
from replay import load_recording, redrive, replay_session

REQ = "tabulate==0.9.0"
SCRIPT = "import tabulate\nprint('tabulate', tabulate.__version__)\n"


pytestmark = pytest.mark.usefixtures("data_home")


def write(root: Path, name: str) -> Path:
    d = root / name
    (d / "scripts").mkdir(parents=True)
    (d / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Tables.\nmetadata:\n  requires: "
        f'"python:{REQ}"\n---\nRun scripts/t.py\n'
    )
    (d / "scripts" / "t.py").write_text(SCRIPT)
    return d


def make_agent(kit, skill, lazy: str = "ask") -> Agent:  # type: ignore[no-untyped-def]
    turns = [
        kit.turn(kit.call("skills.load", names=[skill.name])),
        kit.turn(kit.call("skills.run_script", path="scripts/t.py")),
        {"text": "done"},
    ]
    sandbox = "required" if sandbox_available() else "preferred"
    return Agent(
        model=ScriptedModel(turns, follow_history=True),
        model_name="m",
        skills=[skill],
        policy=PolicyConfig(sandbox=sandbox, lazy_install=lazy),  # type: ignore[arg-type]
    )


async def test_a_user_skill_asks_once_anyone_answers_and_the_script_runs(
    kit, tmp_path: Path
) -> None:
    skill = load_skill(write(tmp_path / "skills", "tab"), tier=Tier.USER, source="t")
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        agent = make_agent(kit, skill)
        try:
            session = await agent.run(store, "table", session_id="s")
        finally:
            agent.close()
        assert session.state.status == "awaiting_approval"
        (pending,) = await pending_approvals(store)
        assert pending.action.startswith(f"install {REQ} into skill tab's own environment")
        assert "network for the installer only" in pending.action
        assert "then run scripts/t.py" in pending.action
        assert env_state([REQ]).record is None  # nothing installed before the answer
        (asked,) = kit.of_type(await kit.bodies(store, "s"), ApprovalRequested)
        assert asked.install == (REQ,)

        # Answered from outside (what `skillog approve` and the console do), then resumed.
        await decide_approval(store, "s", pending.call_id, approved=True, decided_by="alice")
        agent = make_agent(kit, skill)
        try:
            done = await agent.resume(store, "s")
        finally:
            agent.close()
        assert done.state.status == "ended"
        bodies = await kit.bodies(store, "s")
        (built,) = kit.of_type(bodies, SkillEnvBuilt)
        (ran,) = kit.of_type(bodies, ScriptExecuted)
        assert built.call_id == pending.call_id and built.skill == "tab"
        assert "tabulate==0.9.0" in built.lock
        # Built before the script ran, and the script ran in it.
        assert bodies.index(built) < bodies.index(ran)
        assert ran.env == built.key and ran.exit_code == 0, ran.refused
        assert "tabulate 0.9.0" in kit.of_type(bodies, ToolCompleted)[-1].content
        assert env_state([REQ]).record is not None
        assert (await verdict(store)).ok

        # A second session finds the environment built: only the script's own
        # approval (a user skill's) is asked for, with nothing to install.
        agent = make_agent(kit, skill)
        try:
            again = await agent.run(store, "table", session_id="s2")
        finally:
            agent.close()
        assert again.state.status == "awaiting_approval"
        (run,) = kit.of_type(await kit.bodies(store, "s2"), ApprovalRequested)
        assert run.install == () and run.action == "run scripts/t.py"

    async with open_sqlite_store(db, readonly=True) as store:
        recording = await load_recording(store, "s")
        assert (await replay_session(store, recording)).ok
        report = await redrive(store, recording)
        assert report.ok and report.complete, report


async def test_a_builtin_skill_installs_preapproved_and_a_denial_installs_nothing(
    kit, store, tmp_path: Path
) -> None:
    builtin = load_skill(write(tmp_path / "a", "tab"), tier=Tier.BUILTIN, source="t")
    agent = make_agent(kit, builtin)
    try:
        session = await agent.run(store, "table", session_id="b")
    finally:
        agent.close()
    assert session.state.status == "ended"
    bodies = await kit.bodies(store, "b")
    (resolved,) = kit.of_type(bodies, ApprovalResolved)
    assert resolved.decided_by == "lazy_install: builtin skill"
    assert kit.of_type(bodies, ScriptExecuted)[0].exit_code == 0

    shutil.rmtree(env_state([REQ]).path)
    user = load_skill(write(tmp_path / "b", "tab"), tier=Tier.USER, source="t")
    await make_agent(kit, user).run(store, "table", session_id="u")
    (pending,) = await pending_approvals(store)
    await decide_approval(store, "u", pending.call_id, approved=False, decided_by="bob")
    await make_agent(kit, user).resume(store, "u")
    bodies = await kit.bodies(store, "u")
    assert kit.of_type(bodies, PolicyDenied)[0].rule == "approval"
    assert not kit.of_type(bodies, SkillEnvBuilt) and env_state([REQ]).record is None


async def test_off_by_default_and_an_offline_install_fails_cleanly(
    kit, store, tmp_path: Path, data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skill = load_skill(write(tmp_path / "skills", "tab"), tier=Tier.BUILTIN, source="t")
    agent = make_agent(kit, skill, lazy="off")
    try:
        await agent.run(store, "table", session_id="off")
    finally:
        agent.close()
    (refused,) = kit.of_type(await kit.bodies(store, "off"), ScriptExecuted)
    assert "skillog skills deps tab --install" in str(refused.refused)

    for key, value in {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_RETRIES": "0",
        "PIP_DEFAULT_TIMEOUT": "2",
    }.items():
        monkeypatch.setenv(key, value)
    agent = make_agent(kit, skill)
    try:
        await agent.run(store, "table", session_id="offline")
    finally:
        agent.close()
    bodies = await kit.bodies(store, "offline")
    failed = [t for t in kit.of_type(bodies, ToolCompleted) if t.tool == "skills.run_script"]
    assert failed[0].is_error and failed[0].error_type == "install_failed"
    assert "nothing was installed" in failed[0].content
    assert not kit.of_type(bodies, SkillEnvBuilt) and not kit.of_type(bodies, ScriptExecuted)
    envs = data_home / "skillog" / "envs"
    assert not envs.exists() or [p for p in envs.iterdir() if not p.name.startswith(".")] == []


async def test_what_the_request_asked_decides_even_if_the_env_appeared_meanwhile(
    kit, tmp_path: Path
) -> None:
    """Built by someone else while the request waited: the approved call still takes the
    install step the log asked for (which finds it built), so re-drive agrees."""
    skill = load_skill(write(tmp_path / "skills", "tab"), tier=Tier.USER, source="t")
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        await make_agent(kit, skill).run(store, "table", session_id="s")
        (pending,) = await pending_approvals(store)
        build_env([REQ])  # `skillog skills deps tab --install`, say
        await decide_approval(store, "s", pending.call_id, approved=True, decided_by="alice")
        agent = make_agent(kit, skill)
        try:
            await agent.resume(store, "s")
        finally:
            agent.close()
        bodies = await kit.bodies(store, "s")
        (built,) = kit.of_type(bodies, SkillEnvBuilt)
        assert kit.of_type(bodies, ScriptExecuted)[0].env == built.key
    async with open_sqlite_store(db, readonly=True) as store:
        report = await redrive(store, await load_recording(store, "s"))
        assert report.ok and report.complete, report


def test_the_catalog_offers_a_skill_without_its_environment_only_under_lazy_install(
    tmp_path: Path,
) -> None:
    """``run``/``serve`` index with their policy's ``lazy_install``: under ``ask`` the
    skill is offered (its first script asks to build it), otherwise it is unavailable
    with the command that installs; a python-version it cannot meet stays unavailable."""
    write(tmp_path / "skills", "tab")
    old = write(tmp_path / "skills", "old")
    text = (old / "SKILL.md").read_text().replace('"python:', '"python-version:<3 python:')
    (old / "SKILL.md").write_text(text)
    sources = [SkillSource(path=str(tmp_path / "skills"), tier=Tier.USER, label="t")]
    off = build_catalog(sources)
    assert off.entry("tab").status is Status.UNAVAILABLE
    assert "skillog skills deps tab --install" in str(off.entry("tab").reason)
    ask = build_catalog(sources, lazy_install=True)
    assert ask.entry("tab").status is Status.ENABLED and ask.entry("tab").reason is None
    assert ask.entry("old").status is Status.UNAVAILABLE
    assert "python-version:<3" in str(ask.entry("old").reason)


def test_a_worker_offers_it_to_the_sessions_whose_recorded_policy_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker takes no policy options: which skills it offers a session follows the
    policy the session recorded, so a queued ``lazy_install: ask`` session sees the skill
    still missing its environment and an ``off`` one does not."""
    from orchestrator._events import SessionStarted
    from orchestrator.cli._fleet import agent_factory
    from orchestrator.cli._main import _parser

    write(tmp_path / "skills", "tab")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "none.yaml"))
    args = _parser("worker")[0].parse_args(
        ["worker", "--db", str(tmp_path / "log.db"), "--skills", str(tmp_path / "skills")]
    )
    make = agent_factory(args)
    (tmp_path / "turns.yaml").write_text("turns:\n  - text: done\n")

    def offered(lazy: str) -> list[str]:
        started = SessionStarted(
            agent="a", provider="scripted", model=str(tmp_path / "turns.yaml"), max_tokens=100,
            max_turns=2, max_active_skills=1, file_access=False,
            policy=PolicyConfig(lazy_install=lazy),  # type: ignore[arg-type]
        )  # fmt: skip
        return [s.name for s in make(started).skills]

    assert offered("ask") == ["tab"]
    assert offered("off") == []
