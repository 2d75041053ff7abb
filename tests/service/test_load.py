"""A small, representative slice of the load bench (bench/service.py runs the full one):
sessions submitted at once, each followed live by several clients from its start, the
approvals given through the API while they follow; every follower receives exactly
its session's log, and the per-session wake-ups are all released when they leave."""

from __future__ import annotations

import json

import httpx2 as httpx
import trio

from .conftest import Service
from .test_api import submit, wait_for

SESSIONS = 4
FOLLOWERS = 6  # per session


async def follow(client: httpx.AsyncClient, session: str) -> list[tuple[int, str]]:
    got: list[tuple[int, str]] = []
    # Left by cancellation, which closes httpx's nested readers as it unwinds them.
    with trio.CancelScope() as done:
        async with client.stream("GET", f"/api/sessions/{session}/stream") as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    got.append((event["seq"], event["hash"]))
                    if event["type"] == "session.ended":
                        done.cancel()
    assert got and done.cancelled_caught, "the stream ended before the session"
    return got


async def test_many_followers_each_receive_exactly_the_log(service: Service) -> None:
    received: list[tuple[str, list[tuple[int, str]]]] = []
    limits = httpx.Limits(max_connections=None)
    with trio.fail_after(60):
        async with service.client("victor", limits=limits) as client, trio.open_nursery() as n:

            async def one(session: str) -> None:
                received.append((session, await follow(client, session)))

            async def session_with_followers() -> None:
                session = await submit(service)
                for _ in range(FOLLOWERS):
                    n.start_soon(one, session)
                view = await wait_for(service, session, "awaiting_approval")
                call = view["pending_approvals"][0]["call_id"]  # type: ignore[index]
                async with service.client("april") as approver:
                    url = f"/api/sessions/{session}/approvals/{call}/approve"
                    assert (await approver.post(url, json={})).status_code == 200

            for _ in range(SESSIONS):
                n.start_soon(session_with_followers)
    assert len(received) == SESSIONS * FOLLOWERS
    for session, got in received:
        assert got == [(e.seq, e.hash) async for e in service.store.read(session)]
    # Nothing is kept for streams nobody follows any more (once the server saw them go).
    with trio.fail_after(10):
        while service.tail.kept():  # noqa: ASYNC110 - the server notices by itself
            await trio.sleep(0.05)
