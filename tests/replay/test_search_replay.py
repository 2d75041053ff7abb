"""skills.search in a real session: recorded as a tool result, replayed and re-driven
from the log alone, never searched again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import trio

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, PromptRendered, ToolCompleted
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Tier, load_skill
from replay import load_recording, redrive, replay_session

from .conftest import call, golden, write_skill

TURNS = [
    {"tool_calls": [call("skills.search", query="fill a pdf form", limit=2)]},
    {"tool_calls": [call("skills.list")]},
    {"tool_calls": [call("skills.load", names=["pdf-forms"])]},
    {"tool_calls": [call("skills.search", query="x", limit=99)]},
    {"text": "done"},
]


async def record(db: Path, skills_dir: Path, mode: str) -> str:
    dirs = await trio.to_thread.run_sync(lambda: sorted(skills_dir.iterdir()))
    skills = [load_skill(p, tier=Tier.BUILTIN, source="test:builtin") for p in dirs]
    agent = Agent(
        model=ScriptedModel(TURNS),
        model_name="test-script",
        skills=skills,
        clock=golden.fixed_clock(),
        catalog_mode=mode,  # type: ignore[arg-type]
    )
    try:
        async with open_sqlite_store(db) as store:
            session = await agent.run(store, "Fill in the form.", session_id="s1")
    finally:
        agent.close()
    return session.id


def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(root, "pdf-forms", "# Filling forms\nUse the fields.\n")
    write_skill(root, "spreadsheets", "# Formulas\n")
    write_skill(root, "notes", "# PDF notes\nAbout reading.\n")
    return root


async def test_search_is_recorded_and_replay_and_redrive_never_search(tmp_path: Path) -> None:
    root = skills(tmp_path)
    db = tmp_path / "log.db"
    await record(db, root, "search")
    shutil.rmtree(root)  # nothing on disk left to search
    async with open_sqlite_store(db, readonly=True) as store:
        recording = await load_recording(store, "s1")
        bodies = [CODEC.decode(e) async for e in store.read("s1")]
        report = await replay_session(store, recording)
        again = await redrive(store, recording)
    assert report.ok and len(report.turns) == 5
    assert again.ok and again.complete
    searched, listed, _, bad = [b for b in bodies if isinstance(b, ToolCompleted)]
    hits = json.loads(searched.content)["results"]
    assert [h["name"] for h in hits] == ["pdf-forms", "notes"]
    assert [s["name"] for s in json.loads(listed.content)["skills"]] == [
        "notes",
        "pdf-forms",
        "spreadsheets",
    ]
    assert bad.is_error and "limit must be 1 to 20" in bad.content
    assert len([b for b in bodies if isinstance(b, PromptRendered)]) == 5


async def test_modes_shape_the_prompt_and_the_tools(tmp_path: Path) -> None:
    from orchestrator._prompt import compose
    from orchestrator._state import SessionState, apply

    root = skills(tmp_path)
    seen = {}
    for mode in ("", "full", "names", "search"):
        db = tmp_path / f"{mode or 'default'}.db"
        await record(db, root, mode)
        async with open_sqlite_store(db, readonly=True) as store:
            events = [e async for e in store.read("s1")]
        state = SessionState("s1")
        for e in events:
            body = CODEC.decode(e)
            if isinstance(body, PromptRendered):
                break
            state = apply(state, body, seq=e.seq, hash=e.hash)
        request = compose(state, {})
        load = next(t for t in request.tools if t.name == "skills.load")
        seen[mode] = (
            request.system,
            {t.name for t in request.tools},
            load.input_schema["properties"]["names"]["items"],
        )
    default, full, names, search = seen[""], seen["full"], seen["names"], seen["search"]
    assert "skills.search" not in default[1]  # sessions without a mode render as before
    assert {"skills.search", "skills.list"} <= full[1] and "<description>" in full[0]
    assert '<skill name="notes"/>' in names[0] and "<description>" not in names[0]
    assert '<available_skills count="3">' in search[0] and "pdf-forms" not in search[0]
    assert "enum" in full[2] and names[2] == search[2] == {"type": "string"}
