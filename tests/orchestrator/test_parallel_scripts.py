"""Many scripts at once: parallel calls in one turn, resume, and processes racing on
one cache of private skill copies."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from orchestrator._events import ScriptExecuted, ToolCompleted
from orchestrator._loop import Agent, drive
from orchestrator.adapters import ScriptedModel
from orchestrator.scripts._sandbox import sandbox_available
from orchestrator.scripts._workdir import WorkdirError, materialize

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")

SLEEPER = "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('done', sys.argv[2])\n"


def eight_calls(kit, delay: str) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    return [
        kit.call("skills.run_script", path="scripts/work.py", args=[delay, str(i)])
        for i in range(8)
    ]


async def test_eight_parallel_calls_in_one_turn_all_run(kit, store, make_skill) -> None:  # type: ignore[no-untyped-def]
    skill = make_skill("busy", files={"scripts/work.py": SLEEPER})
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=["busy"])), kit.turn(*eight_calls(kit, "0.3"))],
        [skill],
    )
    session = await agent.run(store, "work")
    bodies = await kit.bodies(store, session.id)
    runs = kit.of_type(bodies, ScriptExecuted)
    assert len(runs) == 8
    assert all(r.exit_code == 0 and r.refused is None and r.sandbox == "bwrap" for r in runs)
    assert sorted(r.args[1] for r in runs) == [str(i) for i in range(8)]
    completed = [c for c in kit.of_type(bodies, ToolCompleted) if c.tool == "skills.run_script"]
    assert len(completed) == 8 and not any(c.is_error for c in completed)
    # They ran side by side: eight 0.3 s sleeps took far less than 8 x 0.3 s... of their
    # own time each (durations are recorded, wall time is not asserted on a shared box).
    assert all(r.duration_ms >= 300 for r in runs)


async def test_resume_reruns_eight_interrupted_parallel_calls(kit, store, make_skill) -> None:  # type: ignore[no-untyped-def]
    skill = make_skill("busy", files={"scripts/work.py": SLEEPER})
    turns = [kit.turn(kit.call("skills.load", names=["busy"])), kit.turn(*eight_calls(kit, "0.5"))]
    first = kit.agent(turns, [skill])
    with trio.move_on_after(0.3 + 2):  # the process "dies" while the scripts run
        session = await first.start(store, task="work")
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def stop_when_running() -> None:
                    while True:
                        await trio.sleep(0.05)
                        names = [type(b).__name__ for b in await kit.bodies(store, session.id)]
                        if names.count("ScriptStarted") == 8:
                            scope.cancel()

                nursery.start_soon(stop_when_running)
                await drive(session, first.model, first.retry)
    first.effects.close()
    before = kit.of_type(await kit.bodies(store, session.id), ScriptExecuted)
    assert before == []  # interrupted before any outcome
    second = Agent(
        model=ScriptedModel([*turns, {"text": "done"}], follow_history=True),
        model_name="test-model",
        skills=[skill],
    )
    resumed = await second.resume(store, session.id)
    runs = kit.of_type(await kit.bodies(store, resumed.id), ScriptExecuted)
    assert len(runs) == 8 and all(r.exit_code == 0 for r in runs)


RACER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from orchestrator.scripts._workdir import materialize
    files = {{f"scripts/f{{i}}.py": (i % 2 == 0, bytes([i]) * 4096) for i in range(40)}}
    for _ in range(30):
        path = materialize(sys.argv[1], "d" * 64, files)
    print(path)
    """
)


def test_two_processes_race_into_one_cache(tmp_path: Path) -> None:
    code = RACER.format(root=str(Path(__file__).parents[2]))
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(cache)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e.decode() for _, e in outs]
    assert {o.decode().strip() for o, _ in outs} == {str(cache / ("d" * 64))}
    assert sorted(p.name for p in cache.iterdir()) == ["d" * 64]  # no staging left


def test_a_tampered_copy_is_replaced_and_bad_names_refused(tmp_path: Path) -> None:
    files = {"scripts/a.py": (False, b"print(1)\n")}
    path = Path(materialize(tmp_path, "h" * 64, files))
    (path / "scripts").chmod(0o755)
    (path / "scripts" / "a.py").chmod(0o644)
    (path / "scripts" / "a.py").write_bytes(b"print('evil')\n")
    again = Path(materialize(tmp_path, "h" * 64, files))
    assert (again / "scripts" / "a.py").read_bytes() == b"print(1)\n"
    with pytest.raises(WorkdirError):
        materialize(tmp_path, "../x", files)
