"""Shared builders for the replay tests: real sessions in real SQLite files.

Sessions are recorded by the real runtime (``Agent.run`` with a scripted model and
skills written to disk); the golden scenarios come from tests/golden/regenerate.py.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from eventlog import open_sqlite_store
from orchestrator._host_tools import HostTool
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel
from orchestrator.cli import main
from orchestrator.skills import Tier, load_skill

GOLDEN = Path(__file__).parents[1] / "golden"


def load_golden() -> ModuleType:
    """tests/golden/regenerate.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("golden_regenerate", GOLDEN / "regenerate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("golden_regenerate", module)
    spec.loader.exec_module(module)
    return module


golden = load_golden()
call = golden.call


def write_skill(
    root: Path, name: str, body: str, files: dict[str, str | bytes] | None = None
) -> Path:
    skill = root / name
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: The {name} skill, for tests.\n---\n{body}"
    )
    for rel, content in (files or {}).items():
        path = skill / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return skill


def note(text: str) -> str:
    """Write a note."""
    return f"noted: {text}"


async def record(
    db: Path,
    skills_dir: Path,
    turns: list[dict[str, Any]],
    *,
    task: str = "Do the task.",
    session_id: str = "s1",
) -> str:
    """Run a real session on the skills under ``skills_dir``; returns its id."""
    dirs = await trio.to_thread.run_sync(lambda: sorted(skills_dir.iterdir()))
    skills = [load_skill(p, tier=Tier.BUILTIN, source="test:builtin") for p in dirs]
    agent = Agent(
        model=ScriptedModel(turns),
        model_name="test-script",
        skills=skills,
        host_tools=[HostTool.from_function(note)],
        clock=golden.fixed_clock(),
    )
    try:
        async with open_sqlite_store(db) as store:
            session = await agent.run(store, task, session_id=session_id)
    finally:
        agent.close()
    return session.id


TURNS: list[dict[str, Any]] = [
    {"tool_calls": [call("skills.load", names=["writer"])]},
    {"tool_calls": [call("skills.read", path="references/tone.md")]},
    {"tool_calls": [call("skills.load", names=["editor"], mode="add")]},
    {"tool_calls": [call("note", text="draft ready")]},
    {"text": "Here is the draft."},
]


@pytest.fixture(name="golden")
def golden_fixture() -> ModuleType:
    """tests/golden/regenerate.py: the golden scenarios and their recorder."""
    return golden


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(root, "writer", "Write plainly.\n", {"references/tone.md": "Be warm.\n"})
    write_skill(root, "editor", "Cut every needless word.\n")
    return root


@pytest.fixture
def recorded(tmp_path: Path, skills_dir: Path) -> tuple[Path, str]:
    """A five-turn session in tmp_path/log.db: (db path, session id)."""
    db = tmp_path / "log.db"
    return db, trio.run(record, db, skills_dir, TURNS)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``skillog`` in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
