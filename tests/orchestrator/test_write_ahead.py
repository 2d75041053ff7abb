"""Write-ahead as a user sees it: a running script is visible in the log before it
ends; idempotency keys; reconciling interrupted calls; declared effect classes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from eventlog import closing, open_sqlite_store
from orchestrator import (
    Agent,
    HostTool,
    HostToolError,
    InterruptedCall,
    PolicyConfig,
    ToolContext,
    ToolOutcome,
    idempotency_key,
)
from orchestrator._events import ToolCalled, ToolCompleted
from orchestrator.adapters import ScriptedModel


def test_idempotency_keys_are_derived_stable_and_distinct() -> None:
    key = idempotency_key("session-1", "call-1")
    assert key == idempotency_key("session-1", "call-1")
    assert key.startswith("skillog-") and len(key) == len("skillog-") + 32
    assert key != idempotency_key("session-1", "call-2")
    assert key != idempotency_key("session-2", "call-1")
    # No ambiguity between ("a", "bc") and ("ab", "c").
    assert idempotency_key("a", "bc") != idempotency_key("ab", "c")


def test_an_unknown_effect_class_is_refused_when_the_tool_is_made() -> None:
    def f() -> str:
        """F."""
        return ""

    with pytest.raises(HostToolError, match="effect must be one of pure, idempotent"):
        HostTool.from_function(f, effect="sometimes")  # type: ignore[arg-type]


async def test_effect_classes_and_keys_are_recorded_on_every_call(kit, store) -> None:
    def charge(cents: int, context: ToolContext) -> str:
        """Charge."""
        return context.idempotency_key

    def peek() -> str:
        """Peek."""
        return "ok"

    agent = kit.agent(
        [kit.turn(kit.call("charge", cents=1), kit.call("peek"))],
        host_tools=[
            HostTool.from_function(charge, effect="idempotent"),
            HostTool.from_function(peek, effect="pure"),
        ],
    )
    session = await agent.run(store, "go")
    bodies = await kit.bodies(store, session.id)
    called = {c.tool: c for c in kit.of_type(bodies, ToolCalled)}
    assert called["charge"].effect == "idempotent"
    assert called["charge"].idempotency_key == idempotency_key(session.id, called["charge"].call_id)
    assert (called["peek"].effect, called["peek"].idempotency_key) == ("pure", None)
    done = {c.tool: c for c in kit.of_type(bodies, ToolCompleted)}
    assert done["charge"].content == called["charge"].idempotency_key
    started = bodies[0]
    assert [t.effect for t in started.host_tools] == ["idempotent", "pure"]  # type: ignore[attr-defined]


async def test_a_reconciler_answers_for_an_interrupted_call(kit, store, autojump_clock) -> None:
    async def send() -> str:
        """Send, slowly."""
        await trio.sleep(3600)
        return "sent"

    turns = [kit.turn(kit.call("send")), {"text": "done"}]
    tool = HostTool.from_function(send)
    with trio.move_on_after(1):
        await Agent(model=ScriptedModel(turns), model_name="m", host_tools=[tool]).run(
            store, "go", session_id="s"
        )
    asked: list[InterruptedCall] = []

    async def reconcile(call: InterruptedCall) -> ToolOutcome | None:
        asked.append(call)
        return ToolOutcome(content="the mail API says it was sent")

    agent = Agent(
        model=ScriptedModel(turns[1:]), model_name="m", host_tools=[tool], reconcile=reconcile
    )
    await agent.resume(store, "s")
    (done,) = kit.of_type(await kit.bodies(store, "s"), ToolCompleted)
    assert done.reconciled and done.content == "the mail API says it was sent"
    assert [(c.session_id, c.tool) for c in asked] == [("s", "send")]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_a_running_script_is_in_the_log_before_it_ends(tmp_path: Path, make_skill) -> None:
    """Another connection following the log (as `skillog log show --follow` does) sees
    script.started while the script still runs."""
    skill = make_skill(
        "slow",
        files={"scripts/wait.py": "import time\ntime.sleep(1.5)\nprint('finished')\n"},
    )
    turns = [
        {"tool_calls": [{"id": "l", "name": "skills.load", "arguments": {"names": ["slow"]}}]},
        {"tool_calls": [{"id": "r", "name": "skills.run_script",
                         "arguments": {"path": "scripts/wait.py"}}]},
        {"text": "done"},
    ]  # fmt: skip
    agent = Agent(model=ScriptedModel(turns), model_name="m", skills=[skill], policy=PolicyConfig())
    db = tmp_path / "log.db"
    seen: list[str] = []
    async with open_sqlite_store(db) as store, trio.open_nursery() as nursery:
        nursery.start_soon(agent.run, store, "go")
        async with (
            open_sqlite_store(db, readonly=True) as follower,
            closing(follower.follow()) as events,
        ):
            async for event in events:
                seen.append(event.type)
                if event.type == "script.started":
                    break
        # The script is still running: its outcome is not in the log yet.
        assert "script.executed" not in [e.type async for e in store.read_all()]
    agent.close()
    assert seen[-1] == "script.started"


def test_log_show_follow_prints_a_running_script(tmp_path: Path) -> None:
    """The same through the CLI a user types, with the session in another process."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    skill = tmp_path / "skills" / "slow"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: slow\ndescription: Slow.\n---\nWait.\n")
    (skill / "scripts" / "wait.py").write_text("import time\ntime.sleep(3)\n")
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [slow]}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {path: scripts/wait.py}}]\n"
        "  - text: done\n"
    )
    db = tmp_path / "log.db"
    cli = [sys.executable, "-m", "orchestrator.cli"]
    run = subprocess.Popen(
        [*cli, "run", "wait", "--model", f"scripted:{script}", "--skills", str(skill),
         "--tier", "org", "--db", str(db)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    follow = subprocess.Popen(
        [*cli, "log", "show", "--follow", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert follow.stdout is not None
        lines = []
        for line in follow.stdout:
            lines.append(line)
            if "script.started" in line:
                break
        assert run.poll() is None  # the session (and its script) is still running
        assert not any("script.executed" in line for line in lines)
    finally:
        follow.kill()
        follow.wait()
        follow.stdout.close()  # type: ignore[union-attr]
        run.wait(timeout=60)
    assert run.returncode == 0
