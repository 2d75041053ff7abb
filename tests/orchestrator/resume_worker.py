"""A separate process for the resume tests: crash mid-session, resume, or recompose.

usage: resume_worker.py MODE DB SKILLS_DIR [SESSION]
  run       run the whole scripted session; print its id
  crash     the same, but SIGKILL this process inside the second tool call
  resume    reopen SESSION from the log and drive it to its end
  compose   print the sha256 of every request recomposed from the log alone
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
from pathlib import Path

import trio

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, PromptRendered
from orchestrator._host_tools import HostTool
from orchestrator._loop import Agent
from orchestrator._prompt import compose, request_bytes
from orchestrator._state import SessionState, apply
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Tier, load_skill

# Explicit call ids: a scripted model numbers calls by its own count, which restarts in a
# resumed process; a real provider's ids come from the provider and are in the log.
TURNS = [
    {"tool_calls": [{"id": "c1", "name": "skills.load", "arguments": {"names": ["notes"]}}]},
    {"tool_calls": [{"id": "c2", "name": "stamp", "arguments": {"n": 1}}]},
    {"tool_calls": [{"id": "c3", "name": "stamp", "arguments": {"n": 2}}]},
    {"tool_calls": [{"id": "c4", "name": "skills.read", "arguments": {"path": "references/a.md"}}]},
    {"text": "all done"},
]


def agent(skills_dir: str, *, crash_at: int | None, skip: int = 0) -> Agent:
    def stamp(n: int) -> str:
        """Stamp a number."""
        if n == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"stamped {n}"

    skill = load_skill(Path(skills_dir) / "notes", tier=Tier.BUILTIN, source="builtin:test")
    return Agent(
        model=ScriptedModel(TURNS[skip:]),
        model_name="m",
        skills=[skill],
        host_tools=[HostTool.from_function(stamp, effect="idempotent")],
    )


async def main(mode: str, db: str, skills_dir: str, session: str = "") -> None:
    async with open_sqlite_store(db) as store:
        if mode in ("run", "crash"):
            done = await agent(skills_dir, crash_at=2 if mode == "crash" else None).run(store, "go")
            print(done.id)
        elif mode == "resume":
            answered = 0
            async for event in store.read(session):
                answered += event.type == "model.responded"
            await agent(skills_dir, crash_at=None, skip=answered).resume(store, session)
        elif mode == "compose":
            state = SessionState(session)
            async for event in store.read(session):
                body = CODEC.decode(event)
                if isinstance(body, PromptRendered):
                    bodies = {
                        s.body_digest: (await store.get_blob(s.body_digest)).decode()
                        for s in state.active
                    }
                    print(hashlib.sha256(request_bytes(compose(state, bodies))).hexdigest())
                apply(state, body, seq=event.seq, hash=event.hash)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:])
