"""Previews of streamed answers: a follower of a session's SSE sees the model's text as
it arrives (``event: delta``, no id), before the recorded ``model.responded``; nothing
of it is in the log. From the server's own workers and, through the log's side file,
from a ``skillog worker`` in another process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2 as httpx
import trio

from orchestrator._previews import side_file

from .conftest import running_service
from .test_api import submit

TEXT = "Streaming, one piece at a time, so that a follower sees it before the end."
SLOW = f"""\
turns:
  - text: "{TEXT}"
    stream_delay_ms: 60
"""

Message = tuple[str, dict[str, object], str | None]  # (event type, data, id)


@asynccontextmanager
async def messages(
    client: httpx.AsyncClient, url: str
) -> AsyncIterator[trio.MemoryReceiveChannel[Message]]:
    """The SSE messages of ``url`` (type, data, id) on a channel, read by a task."""
    send, receive = trio.open_memory_channel[Message](1000)

    async def read(task_status: trio.TaskStatus[None]) -> None:
        async with client.stream("GET", url) as response:
            assert response.status_code == 200, await response.aread()
            task_status.started()
            kind, data, ident = "message", None, None
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("id: "):
                    ident = line[4:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                elif line == "" and data is not None:
                    await send.send((kind, data, ident))
                    kind, data, ident = "message", None, None

    async with trio.open_nursery() as nursery:
        await nursery.start(read)
        yield receive
        nursery.cancel_scope.cancel()


async def watch(client: httpx.AsyncClient, session: str) -> list[Message]:
    """Every message of the session's stream until its ``session.ended``."""
    seen: list[Message] = []
    async with messages(client, f"/api/sessions/{session}/stream?previews=1") as stream:
        with trio.fail_after(60):
            while not seen or seen[-1][1].get("type") != "session.ended":
                seen.append(await stream.receive())
    return seen


def check_previews(seen: list[Message], stored_hashes: list[str]) -> None:
    deltas = [data for kind, data, _ in seen if kind == "delta"]
    events = [data for kind, data, _ in seen if kind == "message"]
    # The log is what it is: the events sent are the stored ones, no preview among them.
    assert [e["hash"] for e in events] == stored_hashes
    assert all(ident is None for kind, _, ident in seen if kind == "delta")
    # The text arrived in pieces, before the response was recorded, and adds up to it.
    responded = next(i for i, m in enumerate(seen) if m[1].get("type") == "model.responded")
    first = next(i for i, m in enumerate(seen) if m[0] == "delta")
    assert first < responded
    assert len(deltas) > 2
    assert "".join(str(d["text"]) for d in deltas) == TEXT
    assert [d["n"] for d in deltas] == list(range(1, len(deltas) + 1))
    assert {d["turn"] for d in deltas} == {1}


async def test_a_follower_sees_the_text_before_the_response(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=SLOW) as service:
        async with service.client("victor") as client:
            # Follow from before the first delta: the session is submitted while the
            # stream is open (a follower joining mid-answer sees the rest).
            session = await submit(service)
            seen = await watch(client, session)
        stored = [e.hash async for e in service.store.read(session)]
    check_previews(seen, stored)
    # The in-process workers wrote the side file too (for followers elsewhere).
    assert side_file(service.db).exists()


async def test_previews_cross_from_a_worker_process(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    """``skillog serve --workers 0`` over a SQLite file, a ``skillog worker`` process
    driving the session: the previews come through the side file."""
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, "--workers", "0", turns=SLOW) as service:
        env = {**os.environ, "SKILLOG_CONFIG": str(config)}
        worker = await trio.lowlevel.open_process(
            [sys.executable, "-m", "orchestrator.cli", "worker", "--db", str(service.db),
             "--poll-ms", "50", "--project", str(tmp_path)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            async with service.client("victor") as client:
                session = await submit(service)
                seen = await watch(client, session)
            stored = [e.hash async for e in service.store.read(session)]
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.stderr is not None
            err = b"".join([chunk async for chunk in worker.stderr])
            code = await worker.wait()
    assert code == 0, err.decode()
    check_previews(seen, stored)
