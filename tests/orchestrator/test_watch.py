"""Hot reload: a watching session rescans its sources between turns, records what was
added, removed or changed before the next prompt, and keeps active skills pinned (a
skill deleted while active stays readable from its snapshot); replayed and re-driven.
Also through ``skillog run --watch``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from eventlog import open_sqlite_store
from orchestrator import HostTool
from orchestrator._events import (
    CatalogIndexed,
    PromptRendered,
    SkillActivationFailed,
    SkillChanged,
    ToolCompleted,
)
from orchestrator._index_log import INDEX_STREAM
from orchestrator.adapters import ScriptedModel
from orchestrator.cli import main
from orchestrator.skills import SkillSource, SkillWatcher, Tier, build_catalog
from replay import load_recording, redrive, replay_session


def write(
    root: Path, name: str, body: str = "Do it.\n", files: dict[str, str] | None = None
) -> Path:
    skill = root / name
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: The {name} skill.\n---\n{body}"
    )
    for rel, text in (files or {}).items():
        (skill / rel).parent.mkdir(parents=True, exist_ok=True)
        (skill / rel).write_text(text)
    return skill


def mutate(root: Path) -> None:
    """Between turns: delete alpha (active), change beta, add gamma, break delta."""
    shutil.rmtree(root / "alpha")
    write(root, "beta", body="Do it differently, now with more words.\n")
    write(root, "gamma")
    if (root / "delta").exists():
        (root / "delta" / "SKILL.md").write_text("---\nname: delta\n---\nno description\n")


async def system_of(store, prompt: PromptRendered) -> str:  # type: ignore[no-untyped-def]
    return str(json.loads((await store.get_blob(prompt.tail_digest)).decode())["system"])


async def test_a_watching_session_records_changes_and_keeps_active_skills_pinned(
    kit, store, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    write(root, "alpha", files={"references/guide.md": "# Alpha guide\n"})
    write(root, "beta")
    write(root, "delta")
    source = SkillSource(path=str(root), tier=Tier.ORG, label="org:src")
    catalog = build_catalog([source])
    watcher = SkillWatcher([source])

    def change_skills() -> str:
        """Change the skill sources."""
        mutate(root)
        return "changed"

    agent = kit.agent(
        [
            kit.turn(kit.call("skills.load", names=["alpha"])),
            kit.turn(kit.call("change_skills")),
            kit.turn(
                kit.call("skills.read", path="references/guide.md"),
                kit.call("skills.load", names=["alpha"], mode="add"),
            ),
            kit.turn(kit.call("skills.load", names=["gamma"], mode="add")),
        ],
        [catalog.get(e.name) for e in catalog.visible()],
        host_tools=[HostTool.from_function(change_skills, effect="pure")],
        watch=watcher,
    )
    try:
        session = await agent.run(store, "work")
    finally:
        agent.close()
        watcher.close()
    bodies = await kit.bodies(store, session.id)
    changes = kit.of_type(bodies, SkillChanged)
    assert [(c.name, c.cause, c.old_hash is None, c.skill is None) for c in changes] == [
        ("alpha", "rescan", False, True),
        ("beta", "rescan", False, False),
        ("delta", "rescan", False, True),
        ("gamma", "rescan", True, False),
    ]
    assert changes[0].reason == "no longer in its sources"
    assert changes[2].reason is not None and changes[2].reason.startswith("now invalid: ")
    assert "description" in changes[2].reason
    assert changes[1].reason is not None and "files changed" in changes[1].reason
    # Recorded together, right before the prompt of the turn after the change.
    at = bodies.index(changes[0])
    assert bodies[at : at + 4] == changes and isinstance(bodies[at + 4], PromptRendered)
    prompts = kit.of_type(bodies, PromptRendered)
    before, after = await system_of(store, prompts[1]), await system_of(store, prompts[2])
    assert "<name>gamma</name>" not in before and "<name>gamma</name>" in after
    assert "<name>alpha</name>" in before and "<name>alpha</name>" not in after
    assert '<skill name="alpha"' in after  # still active: its instructions stay
    read, reload, gamma = [
        r for r in kit.of_type(bodies, ToolCompleted) if r.tool.startswith("skills.")
    ][1:]
    assert read.content == "# Alpha guide\n" and not read.is_error  # from the snapshot
    assert reload.is_error and "unknown skill 'alpha'" in reload.content
    assert not gamma.is_error and "gamma" in gamma.content
    assert not kit.of_type(bodies, SkillActivationFailed)
    recording = await load_recording(store, session.id)
    assert (await replay_session(store, recording)).ok
    report = await redrive(store, recording)
    assert report.ok, report.divergence


async def test_an_unwatched_session_records_no_rescans(kit, store, tmp_path: Path) -> None:
    root = tmp_path / "src"
    write(root, "alpha")
    catalog = build_catalog([SkillSource(path=str(root), tier=Tier.ORG, label="org:src")])

    def change_skills() -> str:
        """Change the skill sources."""
        write(root, "gamma")
        return "changed"

    agent = kit.agent(
        [kit.turn(kit.call("change_skills"))],
        [catalog.get("alpha")],
        host_tools=[HostTool.from_function(change_skills, effect="pure")],
    )
    try:
        session = await agent.run(store, "work")
    finally:
        agent.close()
    assert not kit.of_type(await kit.bodies(store, session.id), SkillChanged)


def test_skillog_run_watch_records_the_rescan_and_the_indexing_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    root = project / ".agents" / "skills"
    write(root, "alpha", files={"references/guide.md": "# Alpha guide\n"})
    write(root, "beta")
    home.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text("skills:\n  compact_catalog_over: 1\n  watch: true\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [alpha]}}]\n"
        "  - text: let me look again\n"
        "    tool_calls: [{name: skills.read, arguments: {path: references/guide.md}}]\n"
        "  - text: done\n"
    )
    seen: list[int] = []

    class Mutating(ScriptedModel):
        """The scripted model, changing the sources while it 'thinks' on turn 2."""

        async def complete(self, request):  # type: ignore[no-untyped-def]
            seen.append(1)
            if len(seen) == 2:
                mutate(root)
            return await super().complete(request)

    import orchestrator.adapters as adapters

    real = adapters.adapter_from_spec
    monkeypatch.setattr(
        adapters,
        "adapter_from_spec",
        lambda spec: Mutating.from_file(script) if spec.startswith("scripted:") else real(spec),
    )
    db = tmp_path / "log.db"
    monkeypatch.chdir(project)
    code = main(["run", "work", "--model", f"scripted:{script}", "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 0, out + err

    async def check() -> None:
        async with open_sqlite_store(str(db)) as store:
            (session,) = [
                s.stream
                for s in await store.streams()
                if s.stream != INDEX_STREAM and not s.stream.startswith("lease/")
            ]
            bodies = await _bodies(store, session)
            changes = [b for b in bodies if isinstance(b, SkillChanged)]
            assert {(c.name, c.cause) for c in changes} == {
                ("alpha", "rescan"),
                ("beta", "rescan"),
                ("gamma", "rescan"),
            }
            # watch and compact_catalog_over from the configuration: one line per skill.
            prompts = [b for b in bodies if isinstance(b, PromptRendered)]
            assert '<skill name="alpha">' in await system_of(store, prompts[0])
            indexed = await _bodies(store, INDEX_STREAM)
            (run,) = [b for b in indexed if isinstance(b, CatalogIndexed)]
            assert [e.name for e in run.record.entries] == ["alpha", "beta"]
            sessions.append(session)

    sessions: list[str] = []
    trio.run(check)
    # `skillog replay --redrive` proves every prompt and re-drives the session.
    assert main(["replay", sessions[0], "--db", str(db), "--redrive"]) == 0
    out = capsys.readouterr().out
    assert "every request reproduced byte for byte" in out
    assert "re-drive: the current code reproduces all" in out
    # The command line overrides the configuration (and a typo in it is named).
    config.write_text("skills:\n  wach: true\n")
    assert main(["run", "x", "--model", f"scripted:{script}", "--db", str(db)]) == 2
    assert "did you mean 'watch'?" in capsys.readouterr().err
    config.write_text("skills:\n  compact_catalog_over: 1\n  watch: true\n")
    again = ["run", "again", "--model", f"scripted:{script}", "--db", str(db)]
    assert main([*again, "--no-watch", "--compact-catalog-over", "10"]) == 0

    async def check_again() -> None:
        async with open_sqlite_store(str(db)) as store:
            for info in await store.streams():
                bodies = await _bodies(store, info.stream)
                if any(getattr(b, "text", None) == "again" for b in bodies):
                    assert not [b for b in bodies if isinstance(b, SkillChanged)]
                    prompt = next(b for b in bodies if isinstance(b, PromptRendered))
                    assert "<name>beta</name>" in await system_of(store, prompt)
                    return
            raise AssertionError("no second session")

    trio.run(check_again)


async def _bodies(store, stream: str) -> list[object]:  # type: ignore[no-untyped-def]
    from orchestrator._events import CODEC

    return [CODEC.decode(e) async for e in store.read(stream)]
