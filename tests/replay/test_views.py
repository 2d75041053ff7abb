"""Drift, timeline, fork and re-drive of forked and retried sessions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import trio

import replay
from eventlog import open_sqlite_store, verify
from orchestrator._events import CODEC, SessionForked
from orchestrator._grammar import session_grammar
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel
from replay import load_recording, redrive, replay_session

Cli = Callable[..., tuple[int, str, str]]
Recorded = tuple[Path, str]
GOLDEN = Path(__file__).parents[1] / "golden"


def test_drift_reports_same_changed_and_missing(
    cli: Cli, recorded: Recorded, skills_dir: Path
) -> None:
    db, session = recorded
    code, out, _ = cli("replay", session, "--db", db, "--against-disk", skills_dir)
    assert code == 0
    assert out.count(" same ") == 2
    (skills_dir / "writer" / "references" / "tone.md").write_text("Be cold.\n")
    (skills_dir / "writer" / "references" / "new.md").write_text("New.\n")
    (skills_dir.parent / "elsewhere").mkdir()
    (skills_dir / "editor").rename(skills_dir.parent / "elsewhere" / "editor")
    code, out, _ = cli("replay", session, "--db", db, "--against-disk", skills_dir)
    assert code == 0  # drift is a report; the recorded prompts still replay
    writer = next(line for line in out.splitlines() if line.strip().startswith("writer"))
    assert "changed" in writer and "added references/new.md" in writer
    assert "modified references/tone.md" in writer and "SKILL.md" not in writer
    editor = next(line for line in out.splitlines() if line.strip().startswith("editor"))
    assert "missing" in editor
    # a folder given directly as a skill directory is found too
    elsewhere = skills_dir.parent / "elsewhere" / "editor"
    code, out, _ = cli("replay", session, "--db", db, "--against-disk", elsewhere)
    editor = next(line for line in out.splitlines() if line.strip().startswith("editor"))
    assert " same " in editor and str(elsewhere) in editor


def test_timeline_text_and_json(cli: Cli) -> None:
    args = ("replay", "golden-lifecycle", "--jsonl", GOLDEN / "lifecycle.jsonl", "--timeline")
    code, out, _ = cli(*args)
    assert code == 0
    assert "activation   beta sha256:" in out and "by user" in out
    assert "alpha/assets/pixel.png (67 bytes)" in out
    assert "gamma/scripts/check.py data.csv -> exit 3" in out
    assert "denied by golden approver" in out and "approval?" in out
    assert "denial       lookup (allowed-tools)" in out
    assert "812 in / 24 out tokens" in out
    code, out, _ = cli(*args, "--json")
    doc = json.loads(out)
    kinds = [e["kind"] for e in doc["entries"]]
    assert doc["session"] == "golden-lifecycle"
    for kind in ("activation", "read", "script", "denial", "approval", "model", "ended"):
        assert kind in kinds
    script = next(e for e in doc["entries"] if e["kind"] == "script")
    assert script["details"]["exit_code"] == 3 and script["time"].startswith("2026-01-01T")
    activation = next(e for e in doc["entries"] if e["kind"] == "activation")
    assert len(activation["details"]["hash"]) == 64 and activation["details"]["source"]


def test_fork_starts_a_linked_session_that_replays_resumes_and_redrives(
    cli: Cli, recorded: Recorded
) -> None:
    db, session = recorded
    at = 9  # after the second model response
    code, out, err = cli("replay", session, "--db", db, "--fork-at", str(at))
    assert code == 0 and "resume" in err
    fork = out.strip()
    assert fork and fork != session

    async def check() -> None:
        async with open_sqlite_store(db) as store:
            original = await load_recording(store, session)
            forked = await load_recording(store, fork)
            link = forked.bodies[0]
            assert isinstance(link, SessionForked)
            assert (link.from_session, link.at_seq) == (session, at)
            assert link.at_hash == original.events[at].hash
            assert [e.body for e in forked.events[1:]] == [
                e.body for e in original.events[: at + 1]
            ]
            assert (await verify(store, grammar=session_grammar)).ok
            assert (await replay_session(store, forked)).ok
            # "what if": continue the fork with another model, then re-drive it
            agent = Agent(
                model=ScriptedModel([{"text": "A different ending."}]), model_name="other"
            )
            await agent.resume(store, fork)
            resumed = await load_recording(store, fork)
            assert CODEC.decode(resumed.events[-1]).reason == "completed"  # type: ignore[attr-defined]
            assert (await replay_session(store, resumed)).ok
            assert (await redrive(store, resumed)).ok

    trio.run(check)
    assert cli("replay", session, "--db", db, "--fork-at", "999")[0] == 2


async def test_redrive_reproduces_retries_of_malformed_answers(tmp_path: Path) -> None:
    agent = Agent(
        model=ScriptedModel([{"empty": True}, {"empty": True}, {"text": "ok"}]),
        model_name="m",
        clock=lambda: 1,
    )
    async with open_sqlite_store(tmp_path / "m.db") as store:
        session = await agent.run(store, "hi", session_id="m")
        recording = await load_recording(store, session.id)
        types = [e.type for e in recording.events]
        assert "model.failed" in types
        assert (await replay_session(store, recording)).ok
        assert (await redrive(store, recording)).ok


def test_the_public_surface() -> None:
    public = {n for n in vars(replay) if not n.startswith("_")}
    assert set(replay.__all__) == public - {"annotations"}
    assert replay.__all__ == sorted(replay.__all__, key=lambda n: (not n.isupper(), n))


def test_conflicting_options_are_refused(cli: Cli, recorded: Recorded) -> None:
    db, session = recorded
    assert cli("replay", session, "--db", db, "--timeline", "--redrive")[0] == 2
    assert cli("replay", session, "--db", db, "--json", "--fork-at", "1")[0] == 2
    assert cli("replay", session, "--db", db, "--json", "--html", "r.html")[0] == 2
    assert cli("replay", session, "--jsonl", "x.jsonl", "--fork-at", "1")[0] == 2
