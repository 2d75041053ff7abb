"""Builders for runtime tests: real skills on disk, scripted models, real stores."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from eventlog import EventStore, MemoryStore, open_store
from orchestrator._catalog import SESSIONS, open_log
from orchestrator._events import CODEC, Event
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Skill, Tier, load_skill

SkillMaker = Callable[..., Skill]
T = TypeVar("T")


@pytest.fixture
def make_skill(tmp_path: Path) -> SkillMaker:
    """Write a skill directory under tmp_path/skills and load it."""

    def make(
        name: str,
        *,
        body: str = "Follow these steps.\n",
        description: str | None = None,
        files: Mapping[str, str | bytes] = {},
        executable: Sequence[str] = (),
        allowed_tools: str | None = None,
        tier: Tier = Tier.BUILTIN,
    ) -> Skill:
        root = tmp_path / "skills" / name
        root.mkdir(parents=True, exist_ok=True)
        front = [f"name: {name}", f"description: {description or f'The {name} skill.'}"]
        if allowed_tools is not None:
            front.append(f"allowed-tools: {allowed_tools}")
        (root / "SKILL.md").write_text("---\n" + "\n".join(front) + "\n---\n" + body)
        for rel, content in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        for rel in executable:
            path = root / rel
            path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return load_skill(root, tier=tier, source=f"test:{tier}")

    return make


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_calls": list(calls)}
    if text is not None:
        out["text"] = text
    return out


def agent(turns: Sequence[Mapping[str, Any]], skills: Sequence[Skill] = (), **kw: Any) -> Agent:
    """An agent on a scripted model whose last turn says 'done'."""
    return Agent(
        model=ScriptedModel([*turns, {"text": "done"}]),
        model_name="test-model",
        skills=skills,
        **kw,
    )


@pytest.fixture
def store() -> EventStore:
    return MemoryStore()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def catalog_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[EventStore]:
    """Each store that keeps the session catalog: memory, SQLite, PostgreSQL."""
    if request.param == "memory":
        yield MemoryStore(projection=SESSIONS)
    elif request.param == "sqlite":
        async with open_log(tmp_path / "log.db") as s:
            yield s
    else:
        async with open_store(request.getfixturevalue("pg_dsn"), projection=SESSIONS) as pg:
            yield pg


async def bodies(store: EventStore, session_id: str) -> list[Event]:
    return [CODEC.decode(e) async for e in store.read(session_id)]


def of_type(items: Sequence[object], kind: type[T]) -> list[T]:
    return [i for i in items if isinstance(i, kind)]


def skillog(
    *args: str | Path, cwd: Path, env: Mapping[str, str] = {}
) -> subprocess.CompletedProcess[str]:
    """Run the skillog command in a new process (no terminal), ``env`` over ours."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
        timeout=120,
    )


class Kit:
    """The helpers above, for test modules (conftest is not importable by name)."""

    call = staticmethod(call)
    turn = staticmethod(turn)
    agent = staticmethod(agent)
    bodies = staticmethod(bodies)
    of_type = staticmethod(of_type)
    skillog = staticmethod(skillog)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
