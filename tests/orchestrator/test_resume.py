"""Resuming a session in a new process, after a SIGKILL mid-turn, and recomposing its
prompts elsewhere: the same log gives the same request bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, PromptRendered, SessionEnded
from orchestrator._verdict import verdict

WORKER = Path(__file__).with_name("resume_worker.py")


def worker(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    notes = tmp_path / "skills" / "notes"
    (notes / "references").mkdir(parents=True)
    (notes / "SKILL.md").write_text("---\nname: notes\ndescription: Take notes.\n---\nBe brief.\n")
    (notes / "references" / "a.md").write_text("reference a\n")
    return tmp_path / "skills"


async def recorded(db: Path, session: str) -> tuple[list[str], object]:
    async with open_sqlite_store(db) as store:
        bodies = [CODEC.decode(e) async for e in store.read(session)]
        assert (await verdict(store)).ok
    hashes = [b.request_hash for b in bodies if isinstance(b, PromptRendered)]
    return hashes, bodies[-1]


async def test_sigkill_mid_turn_then_resume_in_a_new_process(
    tmp_path: Path, skills_dir: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    reference = worker(
        "run", str(tmp_path / "ref.db"), str(skills_dir), cwd=tmp_path, home=tmp_path
    )
    assert reference.returncode == 0, reference.stderr
    ref_hashes, ref_end = await recorded(tmp_path / "ref.db", reference.stdout.strip())

    db = tmp_path / "crash.db"
    crashed = worker("crash", str(db), str(skills_dir), cwd=tmp_path, home=tmp_path)
    assert crashed.returncode == -signal.SIGKILL
    async with open_sqlite_store(db) as store:
        (info,) = await store.streams()
    session = info.stream
    before, _ = await recorded(db, session)
    assert 0 < len(before) < len(ref_hashes)

    # Another process, another working directory and HOME: it continues where the log stops.
    resumed = worker("resume", str(db), str(skills_dir), session, cwd=elsewhere, home=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    hashes, end = await recorded(db, session)
    assert hashes == ref_hashes  # every request, before and after the crash, byte-identical
    assert isinstance(end, SessionEnded) and end.reason == "completed"
    assert isinstance(ref_end, SessionEnded) and ref_end.turns == end.turns


async def test_prompts_recompose_identically_anywhere(tmp_path: Path, skills_dir: Path) -> None:
    db = tmp_path / "s.db"
    run = worker("run", str(db), str(skills_dir), cwd=tmp_path, home=tmp_path)
    session = run.stdout.strip()
    hashes, _ = await recorded(db, session)
    other = tmp_path / "other"
    other.mkdir()
    # Recomposed from the log alone, in another directory and HOME, after the skill folder
    # is gone: the composer reads nothing but the log.
    os.rename(skills_dir, tmp_path / "moved")
    again = worker("compose", str(db), "-", session, cwd=other, home=other)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == hashes
