"""The served-call lane of ``skillog mcp serve`` on stdio (mcp_server/_lane.py): its
replies are the bytes the SDK's path writes, a call it took and the client cancelled is
never answered, and the session it records is the one the SDK's path records."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, ToolCompleted
from orchestrator._model import ToolResult
from orchestrator.mcp_server._lane import PROTOCOLS, result_body

from .test_mcp_serve import CLI, INITIALIZE, env_for

QUOTED = 'Ünïcode ✓ "quoted" \\ back\tslash\u2028 and </script> \x01\n'


@pytest.fixture
def lane_skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills" / "report"
    (root / "references").mkdir(parents=True)
    (root / "SKILL.md").write_text(
        "---\nname: report\ndescription: Write the weekly report.\n---\nRead the references.\n"
    )
    (root / "references" / "format.md").write_text("# Format\nOne line per item.\n")
    (root / "references" / "odd.md").write_text(QUOTED)
    return tmp_path / "skills"


def request(id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


def read(id: int, path: str) -> bytes:
    return request(id, "tools/call", {"name": "skills.read", "arguments": {"path": path}})


INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
OPENING = [
    INITIALIZE + b"\n" + INITIALIZED,
    request(2, "tools/list"),  # starts the session: the SDK's path
    request(3, "tools/call", {"name": "skills.load", "arguments": {"names": ["report"]}}),
]
READS = [
    read(4, "references/format.md"),
    read(5, "references/missing.md"),  # an error result
    read(6, "references/odd.md"),
    request(7, "tools/call", {"name": "skills.read", "arguments": {"path": "../SKILL.md"}}),
]


async def serve(
    tmp_path: Path, skills: Path, lines: list[bytes], ids: set[int], lane: str
) -> tuple[dict[Any, bytes], str]:
    """``skillog mcp serve`` given ``lines`` one by one (each after the replies it
    asks, for a fixed order); the reply lines by id once every one of ``ids`` came, and
    what the server wrote on stderr."""
    db = tmp_path / f"lane-{lane}.db"
    errors = tmp_path / f"lane-{lane}.err"
    replies: dict[Any, bytes] = {}
    with errors.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [*CLI, "mcp", "serve", "--skills", str(skills)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**env_for(tmp_path), "SKILLOG_DB": str(db), "SKILLOG_MCP_LANE": lane},
        )
    assert process.stdin is not None and process.stdout is not None
    received = b""
    try:
        with trio.fail_after(60):
            for line in lines:
                await process.stdin.send_all(line)
                asked = {json.loads(m).get("id") for m in line.splitlines()} & ids
                while not asked <= set(replies):
                    chunk = await process.stdout.receive_some()
                    assert chunk, "the server ended"
                    received += chunk
                    *whole, received = received.split(b"\n")
                    for reply in whole:
                        id = json.loads(reply).get("id")
                        replies[f"note {len(replies)}" if id is None else id] = reply
            await process.stdin.aclose()
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
    return replies, errors.read_text()


async def test_the_lane_writes_the_bytes_the_sdk_writes(tmp_path: Path, lane_skills: Path) -> None:
    """The same messages to a server with the lane and one without (SKILLOG_MCP_LANE=off):
    every reply and notification is the same bytes (results, an error result, text that
    JSON escapes, a refused path), and only the first server says its reads took the
    lane."""
    ids = set(range(1, 8))
    lane, lane_err = await serve(tmp_path, lane_skills, [*OPENING, *READS], ids, "on")
    sdk, sdk_err = await serve(tmp_path, lane_skills, [*OPENING, *READS], ids, "off")
    assert "served-call lane" in lane_err and "served-call lane" not in sdk_err
    assert set(lane) == set(sdk) and ids <= set(lane)
    for id in set(lane) - {1}:  # initialize's result names the server's version only
        assert lane[id] == sdk[id], (id, lane[id], sdk[id])
    assert json.loads(lane[6])["result"]["content"][0]["text"] == QUOTED


async def test_a_lane_call_the_client_cancelled_is_not_answered_and_is_recorded(
    tmp_path: Path, lane_skills: Path
) -> None:
    """``notifications/cancelled`` of a call the lane took: no reply is written (the SDK
    drops a cancelled request's), the call itself is recorded with its outcome, and
    the next call is answered (after the cancelled one would have been: calls run in
    order)."""
    cancel = json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}
    ).encode()
    lines = [*OPENING, read(4, "references/format.md") + cancel + b"\n", READS[1]]
    replies, err = await serve(tmp_path, lane_skills, lines, {1, 2, 3, 5}, "on")
    assert "served-call lane" in err
    assert 4 not in replies and 5 in replies
    async with open_sqlite_store(tmp_path / "lane-on.db") as store:
        (info,) = [i for i in await store.streams() if not i.stream.startswith("lease/")]
        events = [CODEC.decode(e) async for e in store.read(info.stream)]
    assert sum(isinstance(e, ToolCompleted) for e in events) == 3  # load, 4, 5


def test_the_lane_is_off_for_what_it_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_lane.fits``: other protocol revisions, middleware of someone's and the
    switch keep the SDK's path."""
    from orchestrator.mcp_server._lane import fits

    class Server:
        middleware: list[Any]

    class App:
        server = Server()

    app: Any = App()
    app.server.middleware = []
    monkeypatch.delenv("SKILLOG_MCP_LANE", raising=False)
    assert fits(app, "2025-11-25")
    assert not fits(app, "2026-07-28") and not fits(app, None)
    app.server.middleware = [object()]
    assert not fits(app, "2025-11-25")
    app.server.middleware = []
    monkeypatch.setenv("SKILLOG_MCP_LANE", "off")
    assert not fits(app, "2025-11-25")
    assert os.environ["SKILLOG_MCP_LANE"] == "off"


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_the_lane_result_is_the_sdks_at_each_protocol_it_takes(protocol: str) -> None:
    """The result body the lane writes, against the SDK's serialization of the same
    result at each revision the lane serves (its dump, sieve and envelope)."""
    try:
        from mcp.server.runner import _dump_result
        from mcp_types import methods
    except ImportError as e:  # a private name the tested SDK release has
        pytest.skip(f"this SDK release has no {e.name}: compared by the wire test")
    import mcp.types as types
    from mcp.server.runner import ServerRunner  # noqa: F401  (the release compared)

    for text, is_error in [("x", False), (QUOTED, True)]:
        sdk = types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=is_error
        )
        wire = methods.serialize_server_result("tools/call", protocol, _dump_result(sdk))
        envelope = types.JSONRPCResponse(jsonrpc="2.0", id=7, result=wire)
        ours = msgspec.json.encode(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "result": result_body(ToolResult(call_id="c", content=text, is_error=is_error)),
            }
        )
        assert ours == envelope.model_dump_json(by_alias=True, exclude_unset=True).encode()


async def test_a_reply_the_pipe_does_not_take_at_once_is_written_whole_in_turn() -> None:
    """``LineWriter.write_soon`` on a full pipe: the rest of its line is written by a
    task once the reader drains, before a message sent after it, and nothing is
    written once the wire is closed."""
    import fcntl

    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCNotification

    from orchestrator.mcp_server._stdio import LineWriter

    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    fcntl.fcntl(write_fd, 1031, 4096)  # F_SETPIPE_SZ: a small pipe
    wire = trio.lowlevel.FdStream(write_fd)
    writer = LineWriter(wire)
    big = b'{"n": 1, "pad": "' + b"x" * 20_000 + b'"}\n'
    received = b""

    async def drain(until: int) -> None:
        nonlocal received
        while len(received) < until:
            try:
                received += os.read(read_fd, 1 << 16)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(read_fd)

    note = SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="n/2"))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            writer.nursery = nursery
            writer.write_soon(big)  # a part now, the rest from a task
            nursery.start_soon(writer.send, note)  # waits its turn
            await drain(len(big) + 10)
            while not received.endswith(b"\n") or received.count(b"\n") < 2:
                await drain(len(received) + 1)
    first, second, _ = received.split(b"\n")
    assert first + b"\n" == big
    assert json.loads(second)["method"] == "n/2"
    await writer.aclose()
    writer.write_soon(b"late\n")  # closed: dropped, not raised
    await wire.aclose()
    os.close(read_fd)


async def test_a_reply_written_from_another_thread_is_never_cut_by_another_line() -> None:
    """``LineWriter.write_now``, the store's writer thread writing a reply as its
    outcome becomes durable: refused while another line is half-written; a line the
    wire takes only in part is finished ahead of the next line sent, or by
    ``finish_soon`` when none is; nothing once the wire is closed."""
    import fcntl

    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCNotification

    from orchestrator.mcp_server._stdio import LineWriter

    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    fcntl.fcntl(write_fd, 1031, 4096)  # F_SETPIPE_SZ: a small pipe
    wire = trio.lowlevel.FdStream(write_fd)
    writer = LineWriter(wire)
    received = b""

    def big(n: int) -> bytes:
        return b'{"n": %d, "pad": "' % n + b"x" * 20_000 + b'"}\n'

    async def drain(lines: int) -> None:
        nonlocal received
        while received.count(b"\n") < lines:
            try:
                received += os.read(read_fd, 1 << 16)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(read_fd)

    async def from_thread(line: bytes) -> bool:
        return await trio.to_thread.run_sync(writer.write_now, line)

    note = SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="n/5"))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            writer.nursery = nursery
            writer.write_soon(big(1))  # a part now, the rest from a task
            assert not await from_thread(b'{"n": 2}\n')
            await drain(1)
            assert await from_thread(big(3))  # in part
            assert not await from_thread(b'{"n": 4}\n')
            nursery.start_soon(writer.send, note)  # behind the rest of big(3)
            await drain(3)
            assert await from_thread(big(6))  # in part
            writer.finish_soon()  # nothing else to send: the rest goes on its own
            await drain(4)
    lines = received.split(b"\n")
    assert [json.loads(line).get("n", json.loads(line).get("method")) for line in lines[:-1]] == [
        1,
        3,
        "n/5",
        6,
    ]
    assert lines[0] + b"\n" == big(1) and lines[1] + b"\n" == big(3)
    writer.close_wire()
    assert not writer.write_now(b'{"n": 7}\n')  # closed: the descriptor may be reused
    await wire.aclose()
    os.close(read_fd)
