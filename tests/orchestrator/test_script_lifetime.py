"""Scripts live exactly as long as policy says, and any number run in parallel."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import trio

from orchestrator import Agent, PolicyConfig
from orchestrator._events import ScriptExecuted
from orchestrator.adapters import ScriptedModel
from orchestrator.scripts._workdir import materialize

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")


@needs_bwrap
async def test_a_sandboxed_script_outlives_trios_idle_worker_threads(
    kit, store, make_skill
) -> None:
    """trio retires idle worker threads after 10 s; a sandbox forked from one died
    with it (--die-with-parent), so every script was killed at ~10 s."""
    skill = make_skill("long", files={"scripts/long.py": "import time\ntime.sleep(15)\n"})
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=["long"])),
         kit.turn(kit.call("skills.run_script", path="scripts/long.py"))],
        [skill],
        policy=PolicyConfig(script_timeout_ms=60_000),
    )  # fmt: skip
    session = await agent.run(store, "wait")
    agent.close()
    (run,) = kit.of_type(await kit.bodies(store, session.id), ScriptExecuted)
    assert (run.exit_code, run.timed_out, run.sandbox) == (0, False, "bwrap")
    assert run.duration_ms >= 15_000


@needs_bwrap
async def test_eight_parallel_scripts_in_one_turn_then_a_resume(kit, store, make_skill) -> None:
    skill = make_skill(
        "par", files={"scripts/nap.py": "import sys, time\ntime.sleep(0.5)\nprint(sys.argv[1])\n"}
    )
    calls = [
        {"id": f"r{i}", "name": "skills.run_script",
         "arguments": {"path": "scripts/nap.py", "args": [str(i)]}}
        for i in range(8)
    ]  # fmt: skip
    turns = [
        {"tool_calls": [{"id": "l", "name": "skills.load", "arguments": {"names": ["par"]}}]},
        {"tool_calls": calls},
        {"text": "done"},
    ]

    def agent(skip: int) -> Agent:
        return Agent(model=ScriptedModel(turns[skip:]), model_name="m", skills=[skill])

    first = agent(0)
    with trio.move_on_after(0.3 + 2):  # mid-turn: some scripts may be done, some not
        await first.run(store, "go", session_id="s")
    first.close()
    answered = sum(type(b).__name__ == "ModelResponded" for b in await kit.bodies(store, "s"))
    again = agent(answered)
    resumed = await again.resume(store, "s")
    again.close()
    assert resumed.state.status == "ended"
    bodies = await kit.bodies(store, "s")
    runs = {b.call_id: b for b in kit.of_type(bodies, ScriptExecuted)}
    assert sorted(runs) == [f"r{i}" for i in range(8)]
    assert all(r.exit_code == 0 for r in runs.values())
    results = [m for m in resumed.state.messages if m.role == "tool"][-1].parts
    assert [r.content.split('"stdout":"')[1][0] for r in results] == [str(i) for i in range(8)]  # type: ignore[union-attr]


def test_two_processes_materialize_one_skill_at_once(tmp_path: Path) -> None:
    files = {f"scripts/f{i}.py": (i % 2 == 0, f"print({i})\n".encode() * 500) for i in range(50)}
    root = tmp_path / "cache" / "abc123"
    root.parent.mkdir()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                for _ in range(20):
                    materialize(root.parent, root.name, files)
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    assert [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids] == [0, 0]
    assert sorted(p.name for p in root.parent.iterdir()) == ["abc123"]  # no staging left
    for rel, (executable, data) in files.items():
        assert (root / rel).read_bytes() == data
        assert os.access(root / rel, os.X_OK) == executable


async def test_a_rerun_script_records_its_own_start(kit, store, make_skill) -> None:
    """Resumed after its process died while the script ran, a pure (sandboxed) script
    runs again, and the log shows both starts: every process that ran is in it."""
    from orchestrator._events import CODEC, ScriptStarted, ToolCalled

    skill = make_skill("again", files={"scripts/go.py": "print('ran')\n"})
    turns = [
        {"tool_calls": [{"id": "l", "name": "skills.load", "arguments": {"names": ["again"]}}]},
        {"tool_calls": [{"id": "r", "name": "skills.run_script",
                         "arguments": {"path": "scripts/go.py"}}]},
        {"text": "done"},
    ]  # fmt: skip
    agent = Agent(model=ScriptedModel(turns), model_name="m", skills=[skill])
    await agent.run(store, "go", session_id="s")
    agent.close()
    events = [e async for e in store.read("s")]
    cut = next(i for i, e in enumerate(events) if e.type == "script.started") + 1
    # The same log as a process that died right after script.started (its script ran).
    from eventlog import MemoryStore, NewEvent

    crashed = MemoryStore()
    blobs = [b async for _, b in store.read_blobs()]
    await crashed.append(
        "s",
        [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in events[:cut]],
        expected_seq=0,
        blobs=blobs,
    )
    resumed = Agent(model=ScriptedModel(turns, follow_history=True), model_name="m", skills=[skill])
    await resumed.resume(crashed, "s")
    resumed.close()
    bodies = [CODEC.decode(e) async for e in crashed.read("s")]
    assert len(kit.of_type(bodies, ToolCalled)) == 2  # the load and the script: no new intent
    assert [b.call_id for b in kit.of_type(bodies, ScriptStarted)] == ["r", "r"]
    assert len(kit.of_type(bodies, ScriptExecuted)) == 1
