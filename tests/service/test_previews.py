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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2 as httpx
import pytest
import trio
from standin import StandIn, anthropic_events

from orchestrator._events import CODEC, ModelResponded
from orchestrator._previews import POLL_S, side_file

from .conftest import running_service
from .test_api import submit

TEXT = "Streaming, one piece at a time, so that a follower sees it before the end."
SLOW = f"""\
turns:
  - text: "{TEXT}"
    stream_delay_ms: 60
"""
SLOWER = SLOW.replace("stream_delay_ms: 60", "stream_delay_ms: 150")
"""For previews that cross processes (a flush every 50 ms, a poll every 100 ms): five
pieces over 750 ms, so several polls find some while the answer streams, even on a
loaded machine (at 60 ms a piece, a run in CI saw only two before the end)."""

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
                    # no checkpoint here: a cancel lands in httpx's reader, which closes it (a
                    # chunk can hold several messages)
                    send.send_nowait((kind, data, ident))
                    kind, data, ident = "message", None, None

    async with trio.open_nursery() as nursery:
        await nursery.start(read)
        yield receive
        nursery.cancel_scope.cancel()


async def watch(
    client: httpx.AsyncClient, session: str, on_delta: Callable[[], None] = lambda: None
) -> list[Message]:
    """Every message of the session's stream until its ``session.ended``; ``on_delta``
    is called at each delta."""
    seen: list[Message] = []
    async with messages(client, f"/api/sessions/{session}/stream?previews=1") as stream:
        with trio.fail_after(60):
            while not seen or seen[-1][1].get("type") != "session.ended":
                seen.append(await stream.receive())
                if seen[-1][0] == "delta":
                    on_delta()
    return seen


def check_previews(seen: list[Message], stored_hashes: list[str], *, whole: bool) -> None:
    """``whole``: every piece arrived (in one process, a delta is published before the
    response is appended); else the last ones may come after the session's end, which
    closes the stream: lossy by design."""
    deltas = [data for kind, data, _ in seen if kind == "delta"]
    events = [data for kind, data, _ in seen if kind == "message"]
    # The log is what it is: the events sent are the stored ones, no preview among them.
    assert [e["hash"] for e in events] == stored_hashes
    assert all(ident is None for kind, _, ident in seen if kind == "delta")
    # The text arrived in pieces, before the response was recorded, and adds up to it.
    responded = next(i for i, m in enumerate(seen) if m[1].get("type") == "model.responded")
    first = next(i for i, m in enumerate(seen) if m[0] == "delta")
    assert first < responded
    assert len(deltas) >= (3 if whole else 2)
    text = "".join(str(d["text"]) for d in deltas)
    assert text == TEXT if whole else TEXT.startswith(text)
    assert [d["n"] for d in deltas] == list(range(1, len(deltas) + 1))
    assert {d["turn"] for d in deltas} == {1}


async def test_a_follower_sees_the_text_before_the_response(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=SLOW) as service:
        async with service.client("victor") as client:
            # The follower joins after the submission: what streamed before it came,
            # it gets first (the board keeps the answer so far), then the rest.
            session = await submit(service)
            seen = await watch(client, session)
            # Someone follows (the side file is read) after the session ended: the
            # answer kept for late joiners is still the one the workers published, none
            # of it read back from the side file they wrote (CI saw a follower get the
            # last pieces twice when the answer ended between a flush and a poll).
            with service.previews.following("another"):
                await trio.sleep(4 * POLL_S)
            with service.previews.following(session) as late:
                kept = [late.receive_nowait() for _ in range(late.statistics().current_buffer_used)]
        stored = [e.hash async for e in service.store.read(session)]
    check_previews(seen, stored, whole=True)
    assert [p.n for p in kept] == list(range(1, len(kept) + 1))
    assert "".join(p.text for p in kept) == TEXT
    # The in-process workers wrote the side file too (for followers elsewhere), as
    # private as the log.
    assert side_file(service.db).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_previews_cross_from_a_worker_process(
    tmp_path: Path,
    service_env: tuple[Path, dict[str, str]],
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    """``skillog serve --workers 0``, a ``skillog worker`` process driving the session:
    the previews come through the side file (SQLite) or NOTIFY (PostgreSQL)."""
    config, tokens = service_env
    db = tmp_path / "service.db" if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    async with running_service(
        tmp_path, config, tokens, "--workers", "0", turns=SLOWER, db=db
    ) as service:
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
    check_previews(seen, stored, whole=False)


ANSWER = ["Streamed by ", "a real SDK, ", "over HTTP."]
MESSAGE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [], "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 900, "output_tokens": 1, "cache_read_input_tokens": 800,
              "cache_creation_input_tokens": 60},
}  # fmt: skip
EVENTS = [
    {"type": "message_start", "message": MESSAGE},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
      for t in ANSWER),
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]  # fmt: skip


async def test_a_provider_stream_reaches_a_follower_while_it_streams(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path with the real Anthropic SDK: serve's worker streams from a local
    stand-in of the API, which holds the answer after its first piece until the SSE
    follower has received that piece as a delta; the rest then flows, and the log
    records the whole answer, with the cache usage, once."""
    config, tokens = service_env
    with StandIn().serving() as api:
        api.stream(anthropic_events(EVENTS), hold_after=3)  # held after the first piece
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        extra = ("--model", "anthropic:claude-test")
        async with running_service(tmp_path, config, tokens, *extra) as service:
            async with service.client("sam") as client:
                answer = await client.post(
                    "/api/sessions", json={"task": "stream", "model": "anthropic:claude-test"}
                )
                assert answer.status_code == 201, answer.text
                session = answer.json()["session_id"]
                seen = await watch(client, session, api.gate.set)
            bodies = [CODEC.decode(e) async for e in service.store.read(session)]
        assert api.held  # the rest was sent only after the follower had the first piece
    deltas = [str(data["text"]) for kind, data, _ in seen if kind == "delta"]
    assert deltas == ANSWER
    (responded,) = [b for b in bodies if isinstance(b, ModelResponded)]
    assert responded.response.text == "".join(ANSWER)
    usage = responded.response.usage
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (800, 60)
    (request,) = api.requests
    assert request.path == "/v1/messages" and request.body["stream"] is True
    assert request.body["system"][-1]["cache_control"] == {"type": "ephemeral"}


def test_console_shows_the_answer_as_it_streams_in_chromium(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session page shows the streamed text below the trace before the response is
    recorded, and drops it for the recorded response when ``model.responded`` lands.
    A stand-in of the API holds the answer after two pieces until the page has shown
    them: a scripted stream of 0.75 s raced Playwright's polls on a loaded machine (the
    page showed the text between two of its looks, then the recorded response)."""
    import standin
    from chromium import need_chromium
    from playwright.sync_api import expect

    from orchestrator.service import new_token
    from orchestrator.skills._config import add_service_token

    from .conftest import write_skill
    from .test_browser import logged_in
    from .test_cli_serve import start, stop

    need_chromium()
    monkeypatch.setattr(standin, "HOLD_S", 60.0)  # the page may be slow to show it
    config = tmp_path / "config.yaml"
    token, entry = new_token("ada", ("admin",))
    add_service_token(str(config), entry)
    skill = write_skill(tmp_path)
    with StandIn().serving() as api:
        api.stream(anthropic_events(EVENTS), hold_after=4)  # held after two pieces
        env = {
            **os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path / "home"),
            "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.url,
        }  # fmt: skip
        proc, url = start(
            tmp_path, env, "--model", "anthropic:claude-test", "--skills", str(skill),
            "--poll-ms", "100",
        )  # fmt: skip
        try:
            with logged_in(url, token) as page:
                page.fill("#task", "stream to me")
                page.click("#submit button")
                page.wait_for_url(url + "/console/sessions/*")
                responded = page.locator('#events li[data-type="model.responded"]')
                # Some text shows while the answer streams, none of it recorded yet.
                expect(page.locator("#preview")).to_contain_text("".join(ANSWER[:2]))
                assert responded.count() == 0  # held: it cannot be recorded yet
                assert "".join(ANSWER) not in page.locator("#trace").inner_text()
                api.gate.set()
                # Then the recorded response replaces it.
                expect(responded).to_have_count(1, timeout=30_000)
                expect(page.locator("#preview")).to_be_hidden()
                expect(page.locator("#trace .said")).to_have_text("".join(ANSWER))
        finally:
            stop(proc)
        assert api.held
