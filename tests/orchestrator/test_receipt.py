"""The load receipt (seed 002) and the catalog: properties, version, the tools a skill
unlocks, the file listing; through the real loop, then replayed and re-driven."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator import HostTool
from orchestrator._events import (
    CatalogSnapshot,
    PolicyConfig,
    PromptRendered,
    SkillActivated,
    ToolCompleted,
)
from orchestrator._receipt import file_kind, file_listing
from orchestrator.skills import InlineSkill, ManifestEntry, Tier, load_skill
from replay import load_recording, redrive, replay_session

SKILL_MD = """\
---
name: report
description: Build the weekly report.
license: Apache-2.0
compatibility: needs python3
allowed-tools: Read Bash(python3:*)
metadata:
  version: "2.1"
  author: ops
---
Build it.
"""


async def proves(store, session_id: str) -> None:  # type: ignore[no-untyped-def]
    """The session replays byte for byte and the current code re-drives it."""
    recording = await load_recording(store, session_id)
    assert (await replay_session(store, recording)).ok
    report = await redrive(store, recording)
    assert report.ok, report.divergence


def write_report_skill(root: Path) -> Path:
    skill = root / "report"
    for rel, text in {
        "SKILL.md": SKILL_MD,
        "scripts/build.py": "print('built')\n",
        "references/format.md": "# Format\n",
        "references/deep/more.md": "deeper\n",
        "assets/logo.txt": "LOGO",
        ".secret": "hidden\n",
        "notes.txt": "n",
    }.items():
        (skill / rel).parent.mkdir(parents=True, exist_ok=True)
        (skill / rel).write_text(text)
    return skill


async def test_the_receipt_carries_what_seed_002_lists(kit, store, tmp_path: Path) -> None:
    skill = load_skill(write_report_skill(tmp_path), tier=Tier.ORG, source="org:test")
    agent = kit.agent([kit.turn(kit.call("skills.load", names=["report"]))], [skill])
    try:
        session = await agent.run(store, "report")
    finally:
        agent.close()
    bodies = await kit.bodies(store, session.id)
    (activated,) = kit.of_type(bodies, SkillActivated)
    assert activated.version == "2.1" and activated.properties is not None
    assert activated.properties.license == "Apache-2.0"
    receipt = json.loads(kit.of_type(bodies, ToolCompleted)[0].content)
    (item,) = receipt["active_skills"]
    assert item["version"] == "2.1" and item["tier"] == "org"
    assert item["properties"] == {
        "name": "report",
        "description": "Build the weekly report.",
        "license": "Apache-2.0",
        "compatibility": "needs python3",
        "metadata": {"author": "ops", "version": "2.1"},
        "allowed-tools": "Read Bash(python3:*)",
    }
    # Hidden files are not listed, nor (by default policy) files nested two levels.
    assert item["files"] == [
        {"path": "SKILL.md", "size": len(SKILL_MD), "kind": "instructions"},
        {"path": "assets/logo.txt", "size": 4, "kind": "asset"},
        {"path": "notes.txt", "size": 1, "kind": "file"},
        {"path": "references/format.md", "size": 9, "kind": "reference"},
        {"path": "scripts/build.py", "size": 15, "kind": "script"},
    ]
    assert item["files_omitted"] == {"hidden": 1, "nested": 1}
    # The catalog the model saw names the version.
    (snapshot,) = kit.of_type(bodies, CatalogSnapshot)
    assert snapshot.skills[0].version == "2.1"
    await proves(store, session.id)


async def test_nested_files_are_listed_when_policy_lets_them_be_read(
    kit, store, tmp_path: Path
) -> None:
    skill = load_skill(write_report_skill(tmp_path), tier=Tier.ORG, source="org:test")
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=["report"]))],
        [skill],
        policy=PolicyConfig(nested_paths=True),
    )
    try:
        session = await agent.run(store, "report")
    finally:
        agent.close()
    bodies = await kit.bodies(store, session.id)
    (item,) = json.loads(kit.of_type(bodies, ToolCompleted)[0].content)["active_skills"]
    assert {"path": "references/deep/more.md", "size": 7, "kind": "reference"} in item["files"]
    assert item["files_omitted"] == {"hidden": 1}


async def test_the_catalog_and_receipt_show_the_tools_a_skill_unlocks(kit, store) -> None:
    def lint(path: str) -> str:
        """Lint a file."""
        return f"{path}: clean"

    linting = InlineSkill(
        name="linting",
        description="Lint code with the lint tool.",
        body="Use lint.\n",
        tools=(HostTool.from_function(lint),),
        metadata={"version": "1.0.0"},
    )
    agent = kit.agent(
        [
            kit.turn(kit.call("skills.load", names=["linting"])),
            kit.turn(kit.call("lint", path="a.py")),
        ],
        [linting],
    )
    try:
        session = await agent.run(store, "lint")
    finally:
        agent.close()
    bodies = await kit.bodies(store, session.id)
    (snapshot,) = kit.of_type(bodies, CatalogSnapshot)
    assert snapshot.skills[0].tools == ("lint",)
    load, called = kit.of_type(bodies, ToolCompleted)
    (item,) = json.loads(load.content)["active_skills"]
    assert item["unlocks"] == [{"name": "lint", "kind": "host"}]
    assert item["files"] == [
        {"path": "SKILL.md", "size": item["files"][0]["size"], "kind": "instructions"}
    ]
    assert called.content == "a.py: clean"
    # The first prompt (before the load) already told the model what loading unlocks.
    first = kit.of_type(bodies, PromptRendered)[0]
    system = json.loads((await store.get_blob(first.tail_digest)).decode())["system"]
    assert "<version>1.0.0</version>" in system and "<tools>lint</tools>" in system
    await proves(store, session.id)


def test_the_listing_kinds_and_its_cap() -> None:
    assert [file_kind(p) for p in ("SKILL.md", "scripts/a.sh", "references/r.md")] == [
        "instructions",
        "script",
        "reference",
    ]
    assert [file_kind(p) for p in ("assets/x", "scripts", "other/SKILL.md")] == [
        "asset",
        "file",
        "file",
    ]
    entries = [ManifestEntry(path=f"f{i}", executable=False, sha256="0" * 64) for i in range(5)]
    listing = file_listing(entries, {"0" * 64: 3}, nested=False, limit=2)
    assert len(listing["files"]) == 2  # type: ignore[arg-type]
    assert listing["files_omitted"] == {"over_limit": 3}
