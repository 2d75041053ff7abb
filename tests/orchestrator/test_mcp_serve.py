"""``skillog mcp serve`` in a subprocess, driven by the official SDK's client over stdio:
the catalog, loading, reading, running a script in the sandbox, hostile arguments,
approvals by elicitation, and the session it leaves in the log, which ``log verify``
and ``replay`` (with ``--redrive``) pass."""

from __future__ import annotations

import base64
import functools
import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from eventlog import open_sqlite_store
from orchestrator._events import (
    CODEC,
    ApprovalResolved,
    Event,
    ModelFailed,
    PolicyDenied,
    ResourceRead,
    ScriptExecuted,
    SessionEnded,
    SessionStarted,
    ToolCompleted,
)
from orchestrator.mcp_server import ServeConfig, ServedSession
from orchestrator.scripts._sandbox import sandbox_available
from otel import map_session
from replay import load_recording, open_log, redrive, replay_session, verify_recording

CLI = [sys.executable, "-m", "orchestrator.cli"]
LOGO = b"\x89PNG\r\n\x1a\n\x00\x00binary"
needs_bwrap = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """A skill with a reference, an asset and a script that writes outside its copy."""
    root = tmp_path / "skills" / "report"
    (root / "scripts").mkdir(parents=True)
    (root / "references").mkdir()
    (root / "SKILL.md").write_text(
        "---\nname: report\ndescription: Write the weekly report.\n---\n"
        "Read references/format.md, then run scripts/count.py.\n"
    )
    (root / "references" / "format.md").write_text("# Format\nOne line per item.\n")
    (root / "assets").mkdir()
    (root / "assets" / "logo.png").write_bytes(LOGO)
    slow = root / "scripts" / "slow.py"
    slow.write_text("import time\ntime.sleep(1.5)\nprint('done')\n")
    script = root / "scripts" / "count.py"
    script.write_text(
        "import os, sys\n"
        "for target in sys.argv[1:]:\n"
        "    try:\n        open(target, 'w').write('x'); print('wrote', target)\n"
        "    except OSError as e:\n        print('refused:', type(e).__name__)\n"
        "print('args', *sys.argv[1:]); print('cwd-files', sorted(os.listdir('.')))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return tmp_path / "skills"


def env_for(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "SKILLOG_CONFIG": str(tmp_path / "config.yaml"),
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }


@asynccontextmanager
async def served(
    tmp_path: Path,
    skills: Path,
    *,
    tier: str = "org",
    elicit: Any = None,
    notes: list[Any] | None = None,
    more: tuple[str, ...] = (),
) -> AsyncIterator[ClientSession]:
    async def note(message: Any) -> None:
        if notes is not None:
            notes.append(message)

    params = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "mcp", "serve", "--skills", str(skills), "--tier", tier, *more],
        env={**env_for(tmp_path), "SKILLOG_DB": str(tmp_path / "mcp.db")},
        cwd=str(tmp_path),
    )
    with (tmp_path / "server.err").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicit, message_handler=note) as client,
        ):
            await client.initialize()
            yield client


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def skillog(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--db", str(tmp_path / "mcp.db")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env_for(tmp_path),
        timeout=120,
    )


async def session_bodies(tmp_path: Path) -> tuple[str, list[Event]]:
    async with open_sqlite_store(tmp_path / "mcp.db") as store:
        (info,) = [i for i in await store.streams() if not i.stream.startswith("lease/")]
        return info.stream, [CODEC.decode(e) async for e in store.read(info.stream)]


def assert_replays_by_cli(tmp_path: Path, session: str) -> None:
    verify = skillog(tmp_path, "log", "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    replay = skillog(tmp_path, "replay", session, "--redrive")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "every request reproduced byte for byte" in replay.stdout
    assert "reproduces all" in replay.stdout


async def assert_replays(tmp_path: Path, session: str) -> None:
    """What ``skillog replay SESSION --redrive`` checks, in this process (the CLI runs
    in the first test): the chain, every prompt byte for byte, and the re-drive."""
    async with open_log(db=tmp_path / "mcp.db") as store:
        await verify_recording(store, session)
        recording = await load_recording(store, session)
        proved = await replay_session(store, recording)
        assert proved.ok and proved.turns, proved.divergence
        redriven = await redrive(store, recording)
        assert redriven.ok, redriven.divergence


@needs_bwrap
async def test_a_real_client_loads_reads_and_runs_and_the_session_replays(
    tmp_path: Path, skills: Path
) -> None:
    notes: list[Any] = []
    async with served(tmp_path, skills, notes=notes) as client:
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == [
            "skills.load",
            "skills.unload",
            "skills.read",
            "skills.run_script",
        ]
        assert "<name>report</name>" in (tools[0].description or "")
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert listed == ["skillog://catalog"]
        catalog = await client.read_resource("skillog://catalog")
        first = catalog.contents[0]
        assert isinstance(first, types.TextResourceContents)
        assert json.loads(first.text)["skills"][0]["name"] == "report"

        loaded = await client.call_tool("skills.load", {"names": ["report"]})
        assert not loaded.is_error
        receipt = json.loads(text(loaded))
        assert receipt["instructions"]["report"].startswith("Read references/format.md")
        digest = receipt["active_skills"][0]["digest"]

        resources = {str(r.uri): r for r in (await client.list_resources()).resources}
        format_md = resources["skill://report/references/format.md"]
        assert format_md.meta is not None and format_md.meta["skill_hash"] == digest
        read = await client.call_tool("skills.read", {"path": "references/format.md"})
        assert text(read) == "# Format\nOne line per item.\n"
        as_resource = await client.read_resource("skill://report/references/format.md")
        content = as_resource.contents[0]
        assert isinstance(content, types.TextResourceContents)
        assert content.text == text(read)
        logo = (await client.read_resource("skill://report/assets/logo.png")).contents[0]
        assert isinstance(logo, types.BlobResourceContents)
        assert base64.b64decode(logo.blob) == LOGO and logo.mime_type == "image/png"

        outside = tmp_path / "escaped"
        ran = await client.call_tool(
            "skills.run_script", {"path": "scripts/count.py", "args": [str(outside)]}
        )
        assert not ran.is_error, text(ran)
        output = json.loads(text(ran))
        assert output["exit_code"] == 0
        assert "refused:" in output["stdout"] and f"args {outside}" in output["stdout"]
    assert not outside.exists()
    changed = {type(n).__name__ for n in notes}
    assert {"ToolListChangedNotification", "ResourceListChangedNotification"} <= changed

    session, bodies = await session_bodies(tmp_path)
    config = bodies[0]
    assert isinstance(config, SessionStarted)
    assert (config.provider, config.model) == ("mcp", "mcp/0.1.0")
    assert any(isinstance(b, ScriptExecuted) and b.sandbox == "bwrap" for b in bodies)
    assert len([b for b in bodies if isinstance(b, ResourceRead)]) == 3
    ended = bodies[-1]
    assert isinstance(ended, SessionEnded) and ended.reason == "closed"
    # What the client received is what the log holds.
    results = [b.content for b in bodies if isinstance(b, ToolCompleted)]
    assert text(loaded) in results and text(ran) in results
    assert f"session {session}" in (tmp_path / "server.err").read_text()
    assert_replays_by_cli(tmp_path, session)
    async with open_sqlite_store(tmp_path / "mcp.db") as store:
        spans, _ = map_session([e async for e in store.read(session)])
    names = [s.name for s in spans]
    assert names[-1] == "invoke_agent skillog-mcp" and "execute_tool skills.run_script" in names


async def test_hostile_arguments_get_clear_errors_and_events_and_nothing_escapes(
    tmp_path: Path, skills: Path
) -> None:
    async with served(tmp_path, skills) as client:
        unknown = await client.call_tool("skills.load", {"names": ["nope"]})
        assert unknown.is_error and "unknown skill 'nope'; available: report" in text(unknown)
        assert not (await client.call_tool("skills.load", {"names": ["report"]})).is_error
        cases = {
            "../../../etc/passwd": "has a '..' segment",
            "/etc/passwd": "absolute",
            "references/../../x": "'..'",
            "references\\..\\x": "backslash",
        }
        for path, why in cases.items():
            result = await client.call_tool("skills.read", {"path": path})
            assert result.is_error and why in text(result), (path, text(result))
        escape = await client.call_tool("skills.run_script", {"path": "../../bin/sh"})
        assert escape.is_error and "'..'" in text(escape)
        other = await client.call_tool("skills.read", {"path": "format.md", "skill": "x"})
        assert other.is_error and "skill 'x' is not loaded" in text(other)
        big = await client.call_tool("skills.read", {"path": "x" * 70_000})
        assert big.is_error and "the limit is 65536" in text(big)
        huge = await client.call_tool("skills.read", {"path": "x" * 1_100_000})
        assert huge.is_error and "skillog records at most 1048576" in text(huge)
        tool = await client.call_tool("Bash", {"command": "cat /etc/passwd"})
        assert tool.is_error and "there is no tool named 'Bash'" in text(tool)
        with pytest.raises(MCPError, match=r"'\.\.' segment"):
            await client.read_resource("skill://report/../../../etc/passwd")
        with pytest.raises(MCPError, match="unknown resource"):
            await client.read_resource("file:///etc/passwd")
        # The session goes on after all of that.
        fine = await client.call_tool("skills.read", {"path": "references/format.md"})
        assert not fine.is_error
        unloaded = await client.call_tool("skills.unload", {"all": True})
        assert json.loads(text(unloaded)) == {"active_skills": []}
        after = await client.call_tool("skills.read", {"path": "references/format.md"})
        assert after.is_error and "needs a loaded skill" in text(after)

    session, bodies = await session_bodies(tmp_path)
    completed = [b for b in bodies if isinstance(b, ToolCompleted)]
    kinds = [b.error_type for b in completed if b.is_error]
    assert kinds.count("path_refused") == 6 and "unknown_skill" in kinds
    assert "unknown_tool" in kinds and "invalid_arguments" in kinds
    failed = [b for b in bodies if isinstance(b, ModelFailed)]
    assert len(failed) == 1 and "1100" in failed[0].message and failed[0].will_retry
    reads = [b for b in bodies if isinstance(b, ResourceRead)]
    assert [r.path for r in reads] == ["references/format.md"]
    await assert_replays(tmp_path, session)


@needs_bwrap
async def test_a_script_that_needs_approval_is_asked_by_elicitation(
    tmp_path: Path, skills: Path
) -> None:
    answers = ["accept", "refuse", "decline"]
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        answer = answers[len(asked) - 1]
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(
            action="accept", content={"approve": answer == "accept", "reason": "checked"}
        )

    async with served(tmp_path, skills, tier="user", elicit=elicit) as client:
        await client.call_tool("skills.load", {"names": ["report"]})
        ran = [
            await client.call_tool("skills.run_script", {"path": "scripts/count.py"})
            for _ in answers
        ]
    assert asked == ["skillog: allow skill report (user) to run scripts/count.py?"] * 3
    assert [r.is_error for r in ran] == [False, True, True], [text(r) for r in ran]
    assert "not approved (mcp/0.1.0 (MCP elicitation))" in text(ran[1])
    session, bodies = await session_bodies(tmp_path)
    resolved = [b for b in bodies if isinstance(b, ApprovalResolved)]
    assert [(r.approved, r.reason) for r in resolved] == [
        (True, "checked"),
        (False, "checked"),
        (False, "the user chose decline"),
    ]
    assert {r.decided_by for r in resolved} == {"mcp/0.1.0 (MCP elicitation)"}
    assert len([b for b in bodies if isinstance(b, ScriptExecuted)]) == 1
    await assert_replays(tmp_path, session)


@needs_bwrap
async def test_a_call_cancelled_while_its_approval_form_is_open_withdraws_the_form(
    tmp_path: Path, skills: Path
) -> None:
    opened, answer = trio.Event(), trio.Event()
    withdrawn: list[bool] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        opened.set()
        await answer.wait()  # the user answers late: after the call was cancelled
        withdrawn.append(True)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with served(tmp_path, skills, tier="user", elicit=elicit) as client:
        await client.call_tool("skills.load", {"names": ["report"]})
        with trio.CancelScope() as call:  # the client gives up on the call
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    client.call_tool, "skills.run_script", {"path": "scripts/count.py"}
                )
                await opened.wait()
                call.cancel()
        answer.set()
        await trio.sleep(0.5)  # time for a late answer to (wrongly) run the script
        # the next call is answered: the session goes on
        after = await client.call_tool("skills.read", {"path": "references/format.md"})
        assert text(after).startswith("# Format")
    session, bodies = await session_bodies(tmp_path)
    (resolved,) = [b for b in bodies if isinstance(b, ApprovalResolved)]
    assert not resolved.approved
    assert resolved.reason is not None and "withdrawn" in resolved.reason
    assert not [b for b in bodies if isinstance(b, ScriptExecuted)]
    assert withdrawn == [True]  # the user did answer, late: it ran nothing
    await assert_replays(tmp_path, session)


async def test_a_client_without_elicitation_is_refused_with_the_reason(
    tmp_path: Path, skills: Path
) -> None:
    async with served(tmp_path, skills, tier="user") as client:
        await client.call_tool("skills.load", {"names": ["report"]})
        ran = await client.call_tool("skills.run_script", {"path": "scripts/count.py"})
    assert ran.is_error
    assert "cannot answer elicitation requests" in text(ran)
    session, bodies = await session_bodies(tmp_path)
    (resolved,) = [b for b in bodies if isinstance(b, ApprovalResolved)]
    assert not resolved.approved and resolved.reason is not None
    assert "does not support elicitation" in resolved.reason
    (denied,) = [b for b in bodies if isinstance(b, PolicyDenied)]
    assert denied.rule == "approval"
    assert not any(isinstance(b, ScriptExecuted) for b in bodies)
    await assert_replays(tmp_path, session)


async def test_concurrent_calls_are_recorded_as_one_turn_each_answered(
    tmp_path: Path, skills: Path
) -> None:
    async with served(tmp_path, skills) as client:
        await client.call_tool("skills.load", {"names": ["report"]})
        results: dict[int, str] = {}

        async def read(i: int) -> None:
            path = "references/format.md" if i % 2 else f"missing-{i}.md"
            results[i] = text(await client.call_tool("skills.read", {"path": path}))

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(read, i)
    assert all(results[i].startswith("# Format") for i in (1, 3, 5))
    assert all(f"no file 'missing-{i}.md'" in results[i] for i in (0, 2, 4))
    session, _ = await session_bodies(tmp_path)
    await assert_replays(tmp_path, session)


async def test_the_session_ends_at_max_calls_and_says_so(tmp_path: Path, skills: Path) -> None:
    async with served(tmp_path, skills, more=("--max-calls", "2")) as client:
        assert not (await client.call_tool("skills.load", {"names": ["report"]})).is_error
        second = await client.call_tool("skills.read", {"path": "references/format.md"})
        assert text(second).startswith("# Format")
        third = await client.call_tool("skills.read", {"path": "references/format.md"})
        assert third.is_error and "has ended (max_turns); reconnect" in text(third)
    session, bodies = await session_bodies(tmp_path)
    ended = bodies[-1]
    assert isinstance(ended, SessionEnded) and ended.reason == "max_turns"
    await assert_replays(tmp_path, session)


@needs_bwrap
async def test_a_client_gone_mid_script_leaves_its_outcome_recorded(
    tmp_path: Path, skills: Path
) -> None:
    async with served(tmp_path, skills) as client:
        await client.call_tool("skills.load", {"names": ["report"]})
        with trio.move_on_after(0.5):
            await client.call_tool("skills.run_script", {"path": "scripts/slow.py"})
    session, bodies = await session_bodies(tmp_path)
    (executed,) = [b for b in bodies if isinstance(b, ScriptExecuted)]
    assert executed.exit_code == 0
    assert [b.tool for b in bodies if isinstance(b, ToolCompleted)][-1] == "skills.run_script"
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "closed"
    await assert_replays(tmp_path, session)


async def test_a_session_whose_server_died_is_not_resumed(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "mcp.db") as store:
        session = await ServedSession("gone/1.0", ServeConfig(skills=())).agent.start(store)
    resumed = skillog(tmp_path, "resume", session.id)
    assert resumed.returncode == 2
    assert "MCP client's connection" in resumed.stderr and "cannot be resumed" in resumed.stderr
    # and the list of sessions does not offer what resume refuses
    listed = skillog(tmp_path, "sessions")
    (row,) = [line for line in listed.stdout.splitlines() if session.id in line]
    assert "open (resumable)" not in row and "MCP client connection, not resumable" in row


INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
).encode()
PING = b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n'


@asynccontextmanager
async def raw_serve(tmp_path: Path, skills: Path) -> AsyncIterator[trio.Process]:
    """``skillog mcp serve`` over stdio with the test writing its wire by hand; its
    stdin is closed at the end."""
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            functools.partial(
                trio.run_process,
                [*CLI, "mcp", "serve", "--skills", str(skills)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**env_for(tmp_path), "SKILLOG_DB": str(tmp_path / "mcp.db")},
                check=False,
            )
        )
        assert process.stdin is not None and process.stdout is not None
        yield process
        await process.stdin.aclose()


async def answers(process: trio.Process, ids: set[int]) -> dict[Any, Any]:
    """The replies on ``process``'s stdout by id, read (whole lines only) until every
    one of ``ids`` is among them."""
    assert process.stdout is not None
    received = b""
    answered: dict[Any, Any] = {}
    while not ids <= set(answered) and (chunk := await process.stdout.receive_some()):
        received += chunk
        lines = received.split(b"\n")[:-1]
        answered = {r.get("id"): r for r in map(json.loads, lines)}
    return answered


async def test_the_stdio_wire_takes_lines_in_pieces_and_survives_garbage(
    tmp_path: Path, skills: Path
) -> None:
    """The transport on trio's pipes (mcp_server/_stdio.py): a message split across
    writes is one message, a line that is not JSON-RPC does not stop the server, and
    the reply is one line on stdout, nothing else."""
    async with raw_serve(tmp_path, skills) as process:
        assert process.stdin is not None
        await process.stdin.send_all(b"not json\n" + INITIALIZE[:20])
        await process.stdin.send_all(INITIALIZE[20:] + b"\n" + PING)
        with trio.fail_after(60):
            answered = await answers(process, {1, 2})
    assert answered[1]["result"]["serverInfo"]["name"] == "skillog"
    assert answered[2]["result"] == {}


async def test_a_client_that_opens_without_initialize_is_served_by_the_sdk_loop(
    tmp_path: Path, skills: Path
) -> None:
    """A client opening with ``initialize`` is served straight from the wire
    (``SkillogMcp.run``); any other opening takes the SDK's ``Server.run``, which
    chooses the protocol era from it: a ping first is answered, then the handshake."""
    async with raw_serve(tmp_path, skills) as process:
        assert process.stdin is not None
        await process.stdin.send_all(PING + INITIALIZE + b"\n")
        with trio.fail_after(60):
            answered = await answers(process, {1, 2})
    assert answered[2]["result"] == {}
    assert answered[1]["result"]["serverInfo"]["name"] == "skillog"


async def test_a_line_over_the_limit_is_dropped_and_the_server_answers_on(
    tmp_path: Path, skills: Path
) -> None:
    """A client that sends a line longer than MAX_LINE (here in 64 KiB writes, no newline
    until the end) does not make the server hold it: the line is dropped as it comes,
    and the next message is answered."""
    from orchestrator.mcp_server._stdio import MAX_LINE

    async with raw_serve(tmp_path, skills) as process:
        assert process.stdin is not None
        await process.stdin.send_all(INITIALIZE + b"\n")
        chunk = b'{"jsonrpc": "2.0", "id": 9, "method": "' + b"x" * (1 << 16)
        with trio.fail_after(120):
            for _ in range(MAX_LINE // len(chunk) + 2):
                await process.stdin.send_all(chunk)
            await process.stdin.send_all(b'"}\n' + PING)
            answered = await answers(process, {2})
    assert answered[2]["result"] == {}
    assert 9 not in answered


GOLDEN = Path(__file__).parents[1] / "golden"
TWO_COMMITS = GOLDEN / "mcp_serve.jsonl"
"""A served session recorded by main at 48a25c3, when every served call committed twice
(the client's request with its intent, then the outcome): tools/list, then load, read,
a missing file, a refused path and unload of tests/golden/skills/alpha."""


async def test_a_session_served_with_two_commits_per_call_replays_and_is_recorded_alike(
    tmp_path: Path,
) -> None:
    recorded = [json.loads(line) for line in TWO_COMMITS.read_text().splitlines()]
    (session,) = {r["stream"] for r in recorded if "stream" in r}
    with trio.fail_after(120):
        replay = await trio.run_process(
            [*CLI, "replay", session, "--jsonl", str(TWO_COMMITS), "--redrive"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=tmp_path,
            env=env_for(tmp_path),
        )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert b"reproduces all" in replay.stdout
    # The same calls today, one commit per call without effect: the same events.
    async with served(tmp_path, GOLDEN / "skills") as client:
        await client.list_tools()
        await client.call_tool("skills.load", {"names": ["alpha"]})
        for path in ("SKILL.md", "missing.md", "../escape"):
            await client.call_tool("skills.read", {"path": path})
        await client.call_tool("skills.unload", {"all": True})
    _, bodies = await session_bodies(tmp_path)
    assert [type(b).event_type for b in bodies] == [r["type"] for r in recorded if "type" in r]
