"""What a live stream's request costs before its frames flow: a follow from the start of
a session other streams follow now, or that the tail saw begin, reads no head (the
bench's followers all follow the newest session, the first of them before any stream
follows it); every other follow still asks the log, and answers as before."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import trio

from .conftest import Service
from .test_api import submit, wait_for
from .test_sse import follow


async def test_a_follow_of_a_followed_session_reads_no_head(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    end = (await service.store.head(session)).seq  # type: ignore[union-attr]
    heads: list[str] = []
    real_head = service.store.head

    async def counted(stream: str) -> Any:
        if sys._getframe(1).f_globals["__name__"] == "orchestrator.service._routes":
            heads.append(stream)  # the API's (not the worker's or the tail's)
        return await real_head(stream)

    monkeypatch.setattr(service.store, "head", counted)
    url = f"/api/sessions/{session}/stream"
    async with service.client("victor") as client, follow(client, url) as first:
        with trio.fail_after(30):
            assert [(await first.receive())[0] for _ in range(end + 1)] == [*range(end + 1)]
        assert heads == []  # the tail saw it begin: it exists, seq 0 is not past its head
        for query in ("", "?from_seq=0"):
            async with follow(client, url + query) as again:
                with trio.fail_after(30):
                    got = [(await again.receive())[0] for _ in range(end + 1)]
                assert got == [*range(end + 1)]
        assert heads == []  # nor the others: it is followed, seq 0 exists
        async with follow(client, url, last=end - 2) as resumed:
            with trio.fail_after(30):
                assert [(await resumed.receive())[0] for _ in range(2)] == [end - 1, end]
        assert heads == [session]  # a resumption still reads the head
        response = await client.get(url.replace(session, "nosuchsession"))
        assert response.status_code == 404
        assert heads[-1] == "nosuchsession"
