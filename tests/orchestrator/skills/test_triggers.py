"""Trigger-based activation (seed 003 PL2): a skill's declared triggers (keywords or a
pattern on the user's message, globs on the files read) activate it, recorded with the
trigger that fired; deterministic, so replay and re-drive reproduce it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eventlog import open_sqlite_store
from orchestrator import Agent, HostTool, ToolContext
from orchestrator._events import PromptRendered, SkillActivated, SkillActivationFailed
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import (
    Tier,
    TriggerError,
    Triggers,
    file_trigger,
    load_skill,
    message_trigger,
    parse_triggers,
)
from replay import load_recording, redrive, replay_session


def write(root: Path, name: str, **metadata: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    meta = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in metadata.items())
    (d / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: The {name} skill.\nmetadata:\n{meta}---\n"
        f"Instructions of {name}.\n"
    )
    return d


def read_file(path: str, context: ToolContext) -> str:
    """Read a file."""
    return f"contents of {path}"


def test_what_fires_and_what_does_not() -> None:
    t = parse_triggers({"trigger-keywords": "CSV pivot-table", "trigger-pattern": r"greet\s+\w+"})
    assert t == Triggers(keywords=("csv", "pivot-table"), pattern=r"greet\s+\w+")
    assert message_trigger(t, "Summarise this Csv, please") == "keyword:csv"
    assert message_trigger(t, "make a pivot-table") == "keyword:pivot-table"
    assert message_trigger(t, "csvkit is not csv-ish") is None  # whole words only
    assert message_trigger(t, "please greet Ada") == r"pattern:greet\s+\w+"
    files = parse_triggers({"trigger-files": "*.parquet data/*.csv"})
    assert files is not None
    assert file_trigger(files, "/w/x.parquet") == "file:*.parquet"
    assert file_trigger(files, "/w/data/a.csv") == "file:data/*.csv"
    assert file_trigger(files, "/w/a.csv") is None
    assert parse_triggers({"version": "1"}) is None
    for bad, says in (
        ({"trigger-pattern": "(a+)+$"}, "catastrophic backtracking"),
        ({"trigger-pattern": "(unclosed"}, "not a regular expression"),
        ({"trigger-pattern": "a" * 201}, "at most 200"),
    ):
        with pytest.raises(TriggerError, match=says):
            parse_triggers(bad)


async def test_a_message_and_a_file_read_activate_what_they_trigger(
    kit: Any, tmp_path: Path
) -> None:
    root = tmp_path / "skills"
    skills = [
        load_skill(
            write(root, "csv-tools", **{"trigger-keywords": "csv"}), tier=Tier.USER, source="t"
        ),
        load_skill(
            write(root, "greeter", **{"trigger-pattern": r"greet\s+\w+"}),
            tier=Tier.USER,
            source="t",
        ),
        load_skill(
            write(root, "parquet", **{"trigger-files": "*.parquet"}), tier=Tier.USER, source="t"
        ),
        load_skill(write(root, "bad", **{"trigger-pattern": "(a+)+"}), tier=Tier.USER, source="t"),
    ]
    turns = [kit.turn(kit.call("read_file", path="/w/data/x.parquet")), {"text": "done"}]
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        agent = Agent(
            model=ScriptedModel(turns),
            model_name="m",
            skills=skills,
            host_tools=[HostTool.from_function(read_file)],
        )
        await agent.run(store, "Summarise this CSV: aaaaaaaaaaaaaaaaaaaaaaaaaaaa!", session_id="s")
        agent.close()
        bodies = await kit.bodies(store, "s")
        assert (await verdict(store)).ok
    activated = kit.of_type(bodies, SkillActivated)
    assert [(a.name, a.trigger, a.fired) for a in activated] == [
        ("csv-tools", "triggered", "keyword:csv"),
        ("parquet", "triggered", "file:*.parquet"),
    ]
    # Activated from the message before the first prompt: the model saw it loaded.
    first_prompt = next(i for i, b in enumerate(bodies) if isinstance(b, PromptRendered))
    assert bodies.index(activated[0]) < first_prompt < bodies.index(activated[1])
    assert activated[1].call_id is not None

    async with open_sqlite_store(db, readonly=True) as store:
        recording = await load_recording(store, "s")
        assert (await replay_session(store, recording)).ok
        report = await redrive(store, recording)
        assert report.ok and report.complete, report


async def test_more_triggered_than_the_cap_records_why(
    kit: Any, store: Any, tmp_path: Path
) -> None:
    root = tmp_path / "skills"
    skills = [
        load_skill(write(root, n, **{"trigger-keywords": "report"}), tier=Tier.USER, source="t")
        for n in ("a-report", "b-report")
    ]
    agent = Agent(
        model=ScriptedModel([{"text": "done"}]),
        model_name="m",
        skills=skills,
        max_active_skills=1,
    )
    await agent.run(store, "write the report", session_id="c")
    agent.close()
    bodies = await kit.bodies(store, "c")
    assert [a.name for a in kit.of_type(bodies, SkillActivated)] == ["a-report"]
    (failed,) = kit.of_type(bodies, SkillActivationFailed)
    assert failed.name == "b-report" and "triggered by keyword:report" in failed.reason


def test_a_broken_trigger_is_a_warning_and_fires_nothing(tmp_path: Path) -> None:
    skill = load_skill(
        write(tmp_path, "bad", **{"trigger-pattern": "(a+)+"}), tier=Tier.USER, source="t"
    )
    (warning,) = skill.warnings
    assert warning.rule == "metadata-trigger" and "never fire" in warning.message
