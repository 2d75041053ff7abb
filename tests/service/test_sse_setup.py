"""What a live stream's request costs before its frames flow: a follow from the start of
a session other streams follow now, or that the tail saw begin, reads no head (the
bench's followers all follow the newest session, the first of them before any stream
follows it); every other follow still asks the log, and answers as before. A session
archived while it is followed: a new follow is 404 as for any archived session, and the
streams that follow it end."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from eventlog import closing
from orchestrator.service import _sse

from .conftest import Service
from .test_api import submit, wait_for
from .test_deploy import approve
from .test_sse import follow

SKILLOG = str(Path(sys.executable).with_name("skillog"))


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


async def _archive(service: Service, tmp_path: Path) -> None:
    """``skillog log archive`` of the sessions ended so far, in a process of its own."""
    key, out = tmp_path / "k.pem", tmp_path / "archive.jsonl"
    await trio.run_process([SKILLOG, "log", "keygen", "--out", str(key)])
    await trio.sleep(0.002)  # after the end's timestamp: --before is exclusive
    before = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    done = await trio.run_process(
        [SKILLOG, "log", "archive", "--before", before, "--key", str(key), "--out", str(out),
         "--db", str(service.db)],
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith(b"archived 1 session"), done


async def test_a_session_archived_while_followed_ends_its_streams_and_is_gone(
    service: Service, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The tail holds no session nobody follows, and a stream reads two events at a time:
    # the follower below stops short of the end, reading the store, as a slow one does.
    monkeypatch.setattr(_sse, "HELD_BYTES", 0)
    monkeypatch.setattr(_sse, "MAX_BATCH", 2)
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    await approve(service, session)
    await wait_for(service, session, "ended")
    url = f"/api/sessions/{session}/stream"
    batches = _sse._batches(service.store, service.tail, session, 0)
    async with closing(batches), service.client("victor") as client:
        first = await batches.__anext__()
        assert [held.event.seq for held in first] == [0, 1]
        assert service.tail.known(session)  # followed now, short of its end
        await _archive(service, tmp_path)
        with trio.fail_after(30):
            while not service.tail.gone(session):  # noqa: ASYNC110 - the tail reads in its time
                await trio.sleep(0.05)  # it sees the archive, made by another process
            # A new follow from seq 0 of a session another stream follows reads no
            # head; once archived, it is 404 as for any archived session.
            again = await client.get(url)
            assert again.status_code == 404, again.text
            # The follower's stream ends (with what its read had taken before the archive
            # landed), instead of waiting for more of a session no longer in the log.
            rest = [held.event.seq async for batch in batches for held in batch]
            assert rest == [*range(2, 2 + len(rest))]
        assert not service.tail.known(session)
        for headers in ({}, {"last-event-id": "1"}):
            again = await client.get(url, headers=headers)
            assert again.status_code == 404, again.text
