"""Sessions using real MCP servers (subprocesses over stdio, one over HTTP on loopback):
the tools under a skill's allowed-tools, hostile servers, approvals, and replay of the
log with the servers gone."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from eventlog import EventStore, open_sqlite_store
from orchestrator import Agent, ApprovalDecision, ApprovalRequest, PolicyConfig
from orchestrator._events import (
    CODEC,
    McpResult,
    McpServerFailed,
    McpTaskCreated,
    McpToolsListed,
    PolicyDenied,
    PromptRendered,
    SessionEnded,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
)
from orchestrator._events import Event as Body
from orchestrator._prompt import tool_specs
from orchestrator._state import SessionState, apply
from orchestrator.adapters import ScriptedModel
from orchestrator.mcp import CONTEXT_META, McpServerConfig
from orchestrator.scripts._limits import ScriptLimits

from .conftest import SERVER, free_port

MB = 1024 * 1024
Stdio = Any
SkillMaker = Any


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(calls)}


def agent(turns: list[dict[str, Any]], skills: Any = (), **options: Any) -> Agent:
    return Agent(
        model=ScriptedModel([*turns, {"text": "done"}]),
        model_name="test-model",
        skills=skills,
        **options,
    )


async def _events(store: EventStore, session: str) -> list[Body]:
    return [CODEC.decode(e) async for e in store.read(session)]


async def _offered(store: EventStore, session: str) -> list[list[str]]:
    """The tools each recorded prompt offered, from the log."""
    state, out = SessionState(session), []
    async for event in store.read(session):
        body = CODEC.decode(event)
        if isinstance(body, PromptRendered):
            out.append([t.name for t in tool_specs(state)])
        apply(state, body, seq=event.seq, hash=event.hash)
    return out


def _completed(events: list[Body]) -> dict[str, ToolCompleted]:
    return {e.call_id: e for e in events if isinstance(e, ToolCompleted)}


async def _replay_cli(db: Path, session: str) -> tuple[int, str]:
    """``skillog replay SESSION --redrive`` in a process of its own: every prompt
    re-rendered byte for byte from the log, and the current code re-driven against the
    recorded results."""
    skillog = Path(sys.executable).with_name("skillog")
    done = await trio.run_process(
        [str(skillog), "replay", session, "--db", str(db), "--redrive"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    output = (done.stdout + done.stderr).decode()
    if done.returncode == 0:
        assert "every request reproduced byte for byte" in output, output
        assert "re-drive: the current code reproduces all" in output, output
    return done.returncode, output


async def test_two_servers_under_a_skill_then_replay_with_the_servers_gone(
    tmp_path: Path, server_dir: Path, stdio: Stdio, make_skill: SkillMaker
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    env = {"MCP_LEDGER": str(ledger)}
    triage = make_skill("triage", allowed_tools="mcp__tracker__find_issue mcp__docs")
    turns = [
        turn(call("skills.load", names=["triage"])),
        turn(
            call("mcp__tracker__find_issue", number=7),
            call("mcp__docs__search", query="flaky"),
            call("mcp__tracker__create_issue", title="refused while triage is active"),
        ),
        turn(call("skills.unload", all=True)),
        turn(
            call("mcp__tracker__screenshot"),
            call("mcp__tracker__big", megabytes=2),
            call("mcp__tracker__fail"),
        ),
        turn(call("mcp__tracker__grow")),
        turn(call("mcp__tracker__extra")),
        turn(call("mcp__tracker__slow", seconds=30)),
        turn(call("mcp__tracker__crash")),
        turn(call("mcp__docs__fetch", page="after the crash")),
    ]
    servers = [
        stdio("tracker", "tracker", env=env, call_timeout_ms=4000),
        stdio("docs", "docs", env=env),
    ]
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        # Caps as for script output: stored in full up to the stored cap, the model's share
        # capped after encoding.
        limits = ScriptLimits(stored_output_bytes=MB)
        policy = PolicyConfig(output_cap_bytes=256 * 1024, script_limits=limits)
        session = await agent(turns, [triage], mcp_servers=servers, policy=policy).run(
            store, "triage #7"
        )
        events = await _events(store, session.id)
        offered = await _offered(store, session.id)
        results = {e.call_id: e for e in events if isinstance(e, McpResult)}
        big = results["call_3_1"]
        stored_big = await store.get_blob(big.digest)
        shot = await store.get_blob(results["call_3_0"].digest)

    assert isinstance(events[-1], SessionEnded) and events[-1].reason == "completed"
    done = _completed(events)
    listed = [e for e in events if isinstance(e, McpToolsListed)]
    assert [(e.server, e.reason) for e in listed] == [
        ("docs", "connected"),
        ("tracker", "connected"),
        ("tracker", "list_changed"),
    ]
    assert {t.name: t.effect for t in listed[1].tools}["mcp__tracker__find_issue"] == "pure"
    assert {t.name: t.effect for t in listed[1].tools}["mcp__tracker__label_issue"] == "idempotent"
    assert {t.name: t.effect for t in listed[1].tools}["mcp__tracker__create_issue"] == (
        "at-most-once"
    )

    # allowed-tools: while triage is active only its MCP tools are offered and run
    assert "mcp__tracker__create_issue" in offered[0]
    assert sorted(n for n in offered[1] if n.startswith("mcp__")) == [
        "mcp__docs__big",
        "mcp__docs__fetch",
        "mcp__docs__search",
        "mcp__tracker__find_issue",
    ]
    # the load receipt names the MCP tools the skill's allowed-tools unlock
    (triage_receipt,) = json.loads(done["call_0_0"].content)["active_skills"]
    assert triage_receipt["unlocks"] == [
        {"name": n, "kind": "mcp"}
        for n in ("mcp__docs__big", "mcp__docs__fetch", "mcp__docs__search")
    ] + [{"name": "mcp__tracker__find_issue", "kind": "mcp"}]
    denied = [e for e in events if isinstance(e, PolicyDenied)]
    assert [(d.tool, d.rule) for d in denied] == [("mcp__tracker__create_issue", "allowed-tools")]
    assert done["call_1_0"].content == 'tracker.find_issue({"number": 7})'
    called = {e.call_id: e for e in events if isinstance(e, ToolCalled)}
    assert called["call_1_0"].skills == ("triage",)
    runs = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert "create_issue" not in [r["tool"] for r in runs]  # refused before any server saw it
    first = next(r for r in runs if r["tool"] == "find_issue")
    assert first["meta"][CONTEXT_META]["skills"] == ["triage"]
    assert first["meta"][CONTEXT_META]["call_id"] == "call_1_0"

    # content as MCP returned it, in the blob store; the model reads text, capped
    assert b'"mimeType":"image/png"' in shot and b'"uri":"file:///tmp/shot.png"' in shot
    assert "[image image/png" in done["call_3_0"].content
    assert big.size > 2 * MB and big.truncated and len(stored_big) == MB
    assert len(done["call_3_1"].content.encode()) <= 256 * 1024
    assert "output cut for the model" in done["call_3_1"].content
    assert (
        done["call_3_2"].error_type == "mcp_error" and done["call_3_2"].content == "no such issue"
    )

    # the list changed mid-session: recorded before the prompt that offers the new tool
    assert "mcp__tracker__extra" not in offered[4] and "mcp__tracker__extra" in offered[5]
    assert done["call_5_0"].content == "tracker.extra({})"

    # a hang, then a crash: clear errors, an event, the session goes on
    assert done["call_6_0"].error_type == "mcp_timeout"
    assert "did not answer slow within 4000 ms" in done["call_6_0"].content
    assert results["call_6_0"].failure == "timeout"
    assert done["call_7_0"].error_type == "mcp_unavailable"
    failed = [e for e in events if isinstance(e, McpServerFailed)]
    assert [(f.server, f.stage) for f in failed] == [("tracker", "call")]
    assert not any(n.startswith("mcp__tracker__") for n in offered[-1])
    assert done["call_8_0"].content == 'docs.fetch({"page": "after the crash"})'

    shutil.rmtree(server_dir)  # the servers are gone: replay and re-drive need only the log
    code, output = await _replay_cli(db, session.id)
    assert code == 0, output


async def test_hostile_servers_are_reported_and_the_session_goes_on(
    tmp_path: Path, server_dir: Path, stdio: Stdio, make_skill: SkillMaker
) -> None:
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=False, decided_by="reviewer", reason="not today")

    servers = [
        stdio("mute", "mute", connect_timeout_ms=700),
        stdio("odd", "odd"),
        stdio("raw", "raw"),
    ]
    turns = [
        turn(
            call("mcp__odd__what_is_this_tool_"),
            call("mcp__odd__fine", q="x"),
            call("mcp__odd__bad_type", a=1),
            call("mcp__mute__anything"),
        ),
        turn(call("skills.load", names=["notes"])),
    ]
    policy = PolicyConfig(approve_host_tools=("mcp__odd__fine",))
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        session = await agent(
            turns,
            [make_skill("notes")],
            mcp_servers=servers,
            policy=policy,
            approver=approver,
        ).run(store, "go")
        events = await _events(store, session.id)
        offered = await _offered(store, session.id)

    failed = {e.server: e for e in events if isinstance(e, McpServerFailed)}
    assert failed["mute"].stage == "connect"
    assert "no answer within 700 ms" in failed["mute"].error
    assert failed["raw"].stage == "list" and "inputSchema" in failed["raw"].error
    odd = next(e for e in events if isinstance(e, McpToolsListed))
    assert [t.name for t in odd.tools] == [
        "mcp__odd__what_is_this_tool_",
        "mcp__odd__skills_load",
        "mcp__odd__fine",
    ]
    assert odd.tools[0].mcp_name == "what is.this/tool?"
    rejected = dict(odd.rejected)
    assert "already the name of another tool" in rejected["what_is_this_tool_"]
    assert "at most 64" in rejected["x" * 80]
    assert "not a valid JSON Schema" in rejected["bad_type"]
    assert {"skills.load", "mcp__odd__skills_load"} <= set(offered[0])

    done = _completed(events)
    assert done["call_0_0"].content == "odd.what is.this/tool?({})"  # the server's own name
    assert done["call_0_1"].error_type == "policy_denied"
    assert [(r.tool, r.arguments) for r in asked] == [("mcp__odd__fine", '{"q":"x"}')]
    assert done["call_0_2"].error_type == "unknown_tool"
    assert done["call_0_3"].error_type == "unknown_tool"
    assert done["call_1_0"].is_error is False  # the runtime's skills.load, not the server's
    assert isinstance(events[-1], SessionEnded) and events[-1].reason == "completed"

    shutil.rmtree(server_dir)
    code, output = await _replay_cli(db, session.id)
    assert code == 0, output


# The SDK's streamable HTTP client leaves httpx2's response iterators to the garbage
# collector when it closes; trio's finalizer warns about each (docs/mcp.md, "trio").
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator:pytest.PytestUnraisableExceptionWarning"
)
async def test_a_server_over_streamable_http_beside_one_over_stdio(
    tmp_path: Path, server_dir: Path, stdio: Stdio, http_docs: str
) -> None:
    servers = [
        stdio("tracker", "tracker"),
        McpServerConfig(name="docs", url=http_docs, headers={"X-Test": "1"}),
    ]
    turns = [
        turn(
            call("mcp__docs__search", query="over http"),
            call("mcp__tracker__find_issue", number=1),
        ),
        turn(call("mcp__docs__big", megabytes=50)),  # over stdio the SDK takes minutes
    ]
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        session = await agent(turns, mcp_servers=servers).run(store, "go")
        events = await _events(store, session.id)
        big = next(e for e in events if isinstance(e, McpResult) and e.tool == "big")
        stored = await store.get_blob(big.digest)
    assert big.size > 50 * MB and big.truncated and len(stored) == 16 * MB  # the stored cap
    listed = {e.server: e for e in events if isinstance(e, McpToolsListed)}
    assert listed["docs"].transport == "http" and listed["tracker"].transport == "stdio"
    assert listed["docs"].server_info == "docs 1.0"
    done = _completed(events)
    assert done["call_0_0"].content == 'docs.search({"query": "over http"})'
    assert done["call_0_1"].content == 'tracker.find_issue({"number": 1})'
    assert len(done["call_1_0"].content.encode()) <= MB  # policy.output_cap_bytes
    assert "output cut for the model" in done["call_1_0"].content
    shutil.rmtree(server_dir)
    code, output = await _replay_cli(db, session.id)
    assert code == 0, output


WORKER = Path(__file__).with_name("mcp_worker.py")


@pytest.mark.parametrize(("effect", "runs"), [("at-most-once", 1), ("pure", 2)])
async def test_sigkill_mid_call_then_resume_follows_the_effect_class(
    tmp_path: Path, server_dir: Path, effect: str, runs: int
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    db = tmp_path / "log.db"
    env = {**os.environ, "MCP_LEDGER": str(ledger)}
    argv = [str(db), str(server_dir), effect]

    async def started() -> bool:  # SIGKILL while the server runs the call
        path = trio.Path(ledger)
        return await path.exists() and "slow" in await path.read_text()

    await _sigkill_then_resume(["run", *argv], ["resume", *argv], env, started)
    async with open_sqlite_store(db) as store:
        events = await _events(store, "crashed")
    called = next(e for e in events if isinstance(e, ToolCalled) and e.call_id == "c2")
    assert called.effect == effect
    interrupted = [e for e in events if isinstance(e, ToolInterrupted)]
    completed = _completed(events)
    if effect == "at-most-once":
        assert [e.call_id for e in interrupted] == ["c2"] and "c2" not in completed
    else:
        assert not interrupted and completed["c2"].content == "slept"  # sent again
    assert isinstance(events[-1], SessionEnded) and events[-1].reason == "completed"
    tools = [json.loads(line)["tool"] for line in ledger.read_text().splitlines()]
    assert tools.count("slow") == runs
    assert tools[-1] == "find_issue"  # the session went on, the server started again


async def test_sigkill_between_a_tasks_creation_and_its_result_then_resume_polls_that_task(
    tmp_path: Path,
) -> None:
    """The task server (over HTTP, so it outlives the driver) counts the tasks it
    creates; the driver is SIGKILLed once the task id is durable, before the result."""
    ledger = tmp_path / "ledger.jsonl"
    db = tmp_path / "log.db"
    env = {**os.environ, "MCP_LEDGER": str(ledger)}
    port = free_port()
    server = await trio.lowlevel.open_process(
        [sys.executable, str(SERVER), "modern", "--http", str(port)], env=env
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await _wait_for_port(port, server)
        argv = [str(db), url]

        async def recorded() -> bool:  # the task id is durable, its result not asked for yet
            return await _has_event(db, "tasked", McpTaskCreated)

        await _sigkill_then_resume(["task-run", *argv], ["task-resume", *argv], env, recorded)
    finally:
        server.kill()
        await server.wait()
    created = [json.loads(line).get("task_created") for line in ledger.read_text().splitlines()]
    assert len([c for c in created if c]) == 1  # one task, polled again after the restart
    async with open_sqlite_store(db) as store:
        events = await _events(store, "tasked")
    (task,) = [e for e in events if isinstance(e, McpTaskCreated)]
    assert task.task_id == next(c for c in created if c)
    assert not [e for e in events if isinstance(e, ToolInterrupted)]
    assert _completed(events)["t1"].content == "job done after 3.0 s"
    assert isinstance(events[-1], SessionEnded) and events[-1].reason == "completed"
    code, output = await _replay_cli(db, "tasked")  # the server is gone
    assert code == 0, output


async def test_a_stdio_server_restarted_on_resume_has_lost_the_task_and_the_call_says_so(
    tmp_path: Path, server_dir: Path
) -> None:
    """A stdio server keeps its tasks in memory: SIGKILL the driver (its server goes
    with it) while the task runs, resume, and the new server process knows no such
    task. The call fails saying so, once; no second task is created."""
    ledger = tmp_path / "ledger.jsonl"
    db = tmp_path / "log.db"
    env = {**os.environ, "MCP_LEDGER": str(ledger)}
    argv = [str(db), str(server_dir)]

    async def recorded() -> bool:  # the task id is durable, the task still running
        return await _has_event(db, "tasked", McpTaskCreated)

    run, resume = ["stdio-task-run", *argv], ["stdio-task-resume", *argv]
    await _sigkill_then_resume(run, resume, env, recorded)
    created = [json.loads(line).get("task_created") for line in ledger.read_text().splitlines()]
    assert len([c for c in created if c]) == 1  # the lost task is not created again
    async with open_sqlite_store(db) as store:
        events = await _events(store, "tasked")
    (task,) = [e for e in events if isinstance(e, McpTaskCreated)]
    (result,) = [e for e in events if isinstance(e, McpResult)]
    assert result.failure == "task_lost"
    done = _completed(events)["t1"]
    assert done.is_error and done.error_type == "mcp_task_lost"
    assert f"MCP server 'modern' no longer knows task {task.task_id}" in done.content
    assert "(tasks/get answered -32602: unknown task" in done.content
    assert "check before retrying" in done.content  # job is at-most-once (no hints)
    assert isinstance(events[-1], SessionEnded) and events[-1].reason == "completed"
    shutil.rmtree(server_dir)
    code, output = await _replay_cli(db, "tasked")  # the server is gone
    assert code == 0, output


# The SDK's HTTP transport leaves the response stream of a request cancelled mid-read
# to the garbage collector (httpx2 async generators): ResourceWarnings, not ours.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_run_cancelled_while_its_task_runs_cancels_the_task_and_resume_records_it(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.touch()
    port = free_port()
    server = await trio.lowlevel.open_process(
        [sys.executable, str(SERVER), "modern", "--http", str(port)],
        env={**os.environ, "MCP_LEDGER": str(ledger)},
    )
    modern = McpServerConfig(name="modern", url=f"http://127.0.0.1:{port}/mcp")
    call = {"id": "t1", "name": "mcp__modern__job", "arguments": {"seconds": 60}}
    try:
        await _wait_for_port(port, server)
        async with open_sqlite_store(tmp_path / "log.db") as store:
            agent = Agent(
                model=ScriptedModel([{"tool_calls": [call]}, {"text": "done"}]),
                model_name="m",
                mcp_servers=[modern],
            )
            with trio.move_on_after(30) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(functools.partial(agent.run, session_id="s1"), store, "go")
                    # once the task id is durable (the server created it a moment before)
                    while not any(  # noqa: ASYNC110 - the log is appended to by the run
                        isinstance(e, McpTaskCreated) for e in await _events(store, "s1")
                    ):
                        await trio.sleep(0.05)
                    nursery.cancel_scope.cancel()  # the run stops while the task runs
            assert not scope.cancelled_caught
            entries = [json.loads(line) for line in ledger.read_text().splitlines()]
            assert [e.get("task_cancelled") for e in entries][-1] == entries[0]["task_created"]
            resume = Agent(
                model=ScriptedModel([{"text": "done"}]), model_name="m", mcp_servers=[modern]
            )
            await resume.resume(store, "s1")
            events = await _events(store, "s1")
    finally:
        server.kill()
        await server.wait()
    (result,) = [e for e in events if isinstance(e, McpResult)]
    assert result.failure == "cancelled"
    done = _completed(events)["t1"]
    assert done.error_type == "mcp_cancelled" and "was cancelled" in done.content


async def _sigkill_then_resume(
    run: list[str], resume: list[str], env: dict[str, str], ready: Callable[[], Awaitable[bool]]
) -> None:
    """Start mcp_worker.py with ``run``, SIGKILL it once ``ready()``, then run it with
    ``resume`` to its end."""
    worker = await trio.lowlevel.open_process([sys.executable, str(WORKER), *run], env=env)
    try:
        while not await ready():
            assert worker.poll() is None, "the worker ended before the point to kill it at"
            await trio.sleep(0.05)
        worker.kill()
        await worker.wait()
        resumed = await trio.run_process(
            [sys.executable, str(WORKER), *resume], env=env, capture_stderr=True, check=False
        )
        assert resumed.returncode == 0, resumed.stderr.decode()
    finally:
        worker.kill()
        await worker.wait()


async def _wait_for_port(port: int, process: trio.Process) -> None:
    deadline = trio.current_time() + 30
    while True:
        try:
            await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
            return
        except OSError:
            assert process.poll() is None and trio.current_time() < deadline, "no HTTP server"
            await trio.sleep(0.05)


async def _has_event(db: Path, session: str, kind: type[Any]) -> bool:
    if not await trio.Path(db).exists():
        return False
    async with open_sqlite_store(db) as store:
        return any(isinstance(e, kind) for e in await _events(store, session))


async def test_skillog_run_uses_the_config_files_servers(tmp_path: Path, server_dir: Path) -> None:
    config = tmp_path / "config.yaml"
    script = server_dir / "mcp_server.py"
    config.write_text(
        f"mcp:\n  servers:\n    docs:\n      command: {sys.executable}\n"
        f"      args: [{script}, docs]\n      call_timeout_ms: 20000\n"
    )
    turns = tmp_path / "turns.yaml"
    turns.write_text(
        "turns:\n"
        "  - tool_calls: [{name: mcp__docs__search, arguments: {query: from the config}}]\n"
        "  - text: found it\n"
    )
    db = tmp_path / "log.db"
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path)}
    ran = await trio.run_process(
        [sys.executable, "-m", "orchestrator.cli", "run", "look it up",
         "--model", f"scripted:{turns}", "--db", str(db)],
        cwd=tmp_path, env=env, capture_stdout=True, capture_stderr=True, check=False,
        stdin=b"",
    )  # fmt: skip
    assert ran.returncode == 0, (ran.stdout + ran.stderr).decode()
    async with open_sqlite_store(db) as store:
        session = next(i.stream for i in await store.streams() if "/" not in i.stream)
        done = _completed(await _events(store, session))
    assert [c.content for c in done.values()] == ['docs.search({"query": "from the config"})']
