"""Replay proves every recorded request from the log alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import orchestrator._prompt
from eventlog import open_sqlite_store
from replay import load_recording, replay_session


async def _replay(db: Path, session: str):  # type: ignore[no-untyped-def]
    async with open_sqlite_store(db, readonly=True) as store:
        return await replay_session(store, await load_recording(store, session))


async def test_every_turn_matches_byte_for_byte(recorded: tuple[Path, str]) -> None:
    report = await _replay(*recorded)
    assert report.ok and len(report.turns) == 5
    assert all(t.request_hash == t.rerendered_hash for t in report.turns)
    assert [n for n, _ in report.turns[-1].skills] == ["writer", "editor"]
    assert report.request_bytes > 0


async def test_replay_needs_no_skill_folders_modified_or_deleted(
    recorded: tuple[Path, str], skills_dir: Path
) -> None:
    before = await _replay(*recorded)
    (skills_dir / "writer" / "SKILL.md").write_text(
        "---\nname: writer\ndescription: changed\n---\nSomething else entirely.\n"
    )
    (skills_dir / "writer" / "references" / "tone.md").write_text("Be cold.\n")
    modified = await _replay(*recorded)
    shutil.rmtree(skills_dir)
    deleted = await _replay(*recorded)
    for report in (modified, deleted):
        assert report.ok
        assert report.turns == before.turns


async def test_a_composer_change_is_a_divergence_with_a_diff(
    recorded: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        orchestrator._prompt,
        "BASE_RULES",
        orchestrator._prompt.BASE_RULES.replace("load it with", "activate it with"),
    )
    report = await _replay(*recorded)
    assert not report.ok and report.divergence is not None
    assert report.divergence.turn == 1 and report.divergence.seq == report.turns[0].seq
    assert all(not t.ok for t in report.turns)  # every turn is checked, not just the first
    diff = report.divergence.diff
    assert "--- recorded (blob store)" in diff and "+++ re-rendered (current code)" in diff
    removed = [line for line in diff.splitlines() if line.startswith("-") and "load it" in line]
    added = [line for line in diff.splitlines() if line.startswith("+") and "activate it" in line]
    assert removed and added
    assert "# tail" in diff  # the hunk is labelled with the part of the request


async def test_a_message_rendering_change_points_at_the_message(
    recorded: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = orchestrator._prompt.message_line
    monkeypatch.setattr(
        orchestrator._prompt,
        "message_line",
        lambda m: real(m).replace(b"Do the task", b"Do a task"),
    )
    report = await _replay(*recorded)
    assert report.divergence is not None and report.divergence.turn == 1
    assert '-      "text": "Do the task."' in report.divergence.diff
    assert "# message 1 (user)" in report.divergence.diff
