"""Live events: what a follower receives is the log, each event once, in seq order,
including across a dropped connection resumed with Last-Event-ID."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trio.testing

from eventlog import (
    MAINTENANCE_STREAM,
    Event,
    EventStore,
    MemoryStore,
    NewEvent,
    closing,
    open_sqlite_store,
)
from orchestrator.service import _sse
from orchestrator.service._sse import WATCHED_POLL_S, Tail, session_events

from .conftest import Service
from .test_api import submit, wait_for


@asynccontextmanager
async def follow(
    client: httpx.AsyncClient, url: str, last: int | None = None
) -> AsyncIterator[trio.MemoryReceiveChannel[tuple[int, dict[str, object]]]]:
    """The SSE messages of ``url`` as (id, event) on a channel, read by a task."""
    send, receive = trio.open_memory_channel[tuple[int, dict[str, object]]](1000)
    headers = {} if last is None else {"last-event-id": str(last)}

    async def read(task_status: trio.TaskStatus[None]) -> None:
        async with client.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            task_status.started()
            ident, data = None, None
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    ident = int(line[4:])
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                elif line == "" and data is not None:
                    assert ident is not None
                    # no checkpoint here: a cancel lands in httpx's reader, which closes it (a
                    # chunk can hold several messages)
                    send.send_nowait((ident, data))
                    ident, data = None, None

    async with trio.open_nursery() as nursery:
        await nursery.start(read)
        yield receive
        nursery.cancel_scope.cancel()


async def five_followers_to_the_end(
    service: Service, session: str, head: int, caught_up: Callable[[], None]
) -> int:
    """Five streams of a suspended ``session`` catch up to ``head``; ``caught_up()``;
    the approval; each receives the rest. Each got every seq once, in order; returns
    the last seq."""
    url = f"/api/sessions/{session}/stream"
    async with service.client("victor") as client, contextlib.AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(follow(client, url)) for _ in range(5)]
        got: list[list[int]] = [[] for _ in streams]
        with trio.fail_after(30):
            for n, events in enumerate(streams):
                while not got[n] or got[n][-1] < head:
                    got[n].append((await events.receive())[0])
        caught_up()
        async with service.client("alice") as admin:
            view = (await admin.get(f"/api/sessions/{session}")).json()
            call = view["pending_approvals"][0]["call_id"]
            await admin.post(f"/api/sessions/{session}/approvals/{call}/approve", json={})
        with trio.fail_after(30):
            for n, events in enumerate(streams):
                while True:
                    seq, event = await events.receive()
                    got[n].append(seq)
                    if event["type"] == "session.ended":
                        break
    end = (await service.store.head(session)).seq  # type: ignore[union-attr]
    assert all(seqs == list(range(end + 1)) for seqs in got)
    return end


async def test_resume_with_last_event_id_misses_nothing(service: Service) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    url = f"/api/sessions/{session}/stream"
    got: list[tuple[int, dict[str, object]]] = []
    async with service.client("victor") as client:
        async with follow(client, url) as events:
            for _ in range(5):
                got.append(await events.receive())
        # Dropped after seq 4. While nobody follows, the session moves on.
        async with service.client("april") as approver:
            view = (await approver.get(f"/api/sessions/{session}")).json()
            call = view["pending_approvals"][0]["call_id"]
            ok = await approver.post(f"/api/sessions/{session}/approvals/{call}/approve", json={})
            assert ok.status_code == 200
        async with follow(client, url, last=got[-1][0]) as events:
            with trio.fail_after(30):
                while got[-1][1]["type"] != "session.ended":
                    got.append(await events.receive())
    stored = [e async for e in service.store.read(session)]
    assert [i for i, _ in got] == [e.seq for e in stored] == list(range(len(stored)))
    assert [d["hash"] for _, d in got] == [e.hash for e in stored]
    assert [d["seq"] for _, d in got] == [i for i, _ in got]


async def test_live_events_arrive_as_they_commit(service: Service) -> None:
    """A follower connected while a session runs sees each event once as it commits,
    across the suspension and the decision."""
    session = await submit(service)
    async with (
        service.client("victor") as client,
        follow(client, f"/api/sessions/{session}/stream") as events,
    ):
        seen = []
        with trio.fail_after(30):
            while not seen or seen[-1]["type"] != "session.suspended":
                seen.append((await events.receive())[1])
        async with service.client("alice") as admin:
            call = next(e for e in seen if e["type"] == "approval.requested")["body"]
            url = f"/api/sessions/{session}/approvals/{call['call_id']}/deny"  # type: ignore[index]
            assert (await admin.post(url, json={"reason": "no"})).status_code == 200
        with trio.fail_after(30):
            while seen[-1]["type"] != "session.ended":
                seen.append((await events.receive())[1])
    stored = [e async for e in service.store.read(session)]
    assert [e["seq"] for e in seen] == [e.seq for e in stored]


async def test_a_quiet_stream_gets_keepalives_between_its_events(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream with nothing to send writes a comment every ``KEEPALIVE_S`` (so proxies
    keep it open), and the events before and after it arrive once each, in order."""
    monkeypatch.setattr(_sse, "KEEPALIVE_S", 0.2)
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    head = await service.store.head(session)
    assert head is not None
    lines: list[str] = []
    async with (
        service.client("victor") as client,
        client.stream("GET", f"/api/sessions/{session}/stream") as response,
    ):
        with trio.fail_after(30), trio.CancelScope() as enough:
            async for line in response.aiter_lines():  # cancelled in httpx's read: closed
                lines.append(line)
                if lines.count(": keepalive") == 2:
                    enough.cancel()
    ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
    assert ids == [*range(head.seq + 1)]
    assert lines.index(": keepalive") > lines.index(f"id: {head.seq}")


async def test_bad_last_event_id_and_one_past_the_head(service: Service) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    async with service.client("victor") as client:
        url = f"/api/sessions/{session}/stream"
        bad = await client.get(url, headers={"last-event-id": "x; DROP"})
        assert bad.status_code == 422 and bad.json()["field"] == "header.last-event-id"
        missing = await client.get("/api/sessions/nope/stream")
        assert missing.status_code == 404
        head = (await service.store.head(session)).seq  # type: ignore[union-attr]
        # An id past the head (a client of another log, say) resumes at the head: the
        # next event to commit is the first one sent.
        async with follow(client, url, last=head + 1000) as events:
            async with service.client("alice") as admin:
                view = (await admin.get(f"/api/sessions/{session}")).json()
                call = view["pending_approvals"][0]["call_id"]
                await admin.post(f"/api/sessions/{session}/approvals/{call}/approve", json={})
            with trio.fail_after(30):
                first = await events.receive()
        assert first[0] == head + 1


async def test_caught_up_followers_share_the_tails_read(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five followers caught up with a session: what commits next reaches each of them
    once, in order, without a read of the session per commit (the tail's one read
    serves them all); the tail keeps nothing of it once they left."""
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    head = (await service.store.head(session)).seq  # type: ignore[union-attr]
    reads: list[int] = []
    real_read = service.store.read

    def counted(stream: str, *, from_seq: int = 0, **kw: Any) -> Any:
        by_sse = sys._getframe(1).f_globals["__name__"] == "orchestrator.service._sse"
        if by_sse and stream == session and from_seq > head:
            reads.append(from_seq)  # a follower reading what it has not seen (not the
            # worker resuming the session, which reads what came after its fold)
        return real_read(stream, from_seq=from_seq, **kw)

    await five_followers_to_the_end(
        service, session, head, lambda: monkeypatch.setattr(service.store, "read", counted)
    )
    # At most one read each (the look after catching up, before the tail held any of
    # the session's events), none per commit: before the tail shared, every commit
    # cost each follower a read.
    assert len(reads) <= 5 and set(reads) <= {head + 1}
    for _ in range(100):  # the server's side of the streams ends just after the client's
        if not service.tail.kept():
            break
        await trio.sleep(0.05)
    assert service.tail.kept() == set()


@asynccontextmanager
async def _beside_another_process(
    tmp_path: Path,
) -> AsyncIterator[tuple[EventStore, EventStore, Tail, trio.Nursery]]:
    """A running tail over one SQLite file (its follow polling once a minute) that
    another connection, another process as far as wake-ups go, also writes."""
    db = tmp_path / "log.db"
    async with (
        open_sqlite_store(db, poll_interval=60) as served,
        open_sqlite_store(db) as other,
        trio.open_nursery() as nursery,
    ):
        tail = Tail(served)
        await nursery.start(tail.run)
        yield served, other, tail, nursery
        nursery.cancel_scope.cancel()


async def test_another_processs_commits_reach_a_follower_without_the_slow_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve --workers 0`` beside a ``skillog worker`` on one SQLite file: the worker's
    commits wake nothing in the server, whose follow polls slowly (here once a minute).
    While a stream is followed, the tail looks every ``WATCHED_POLL_S``: each commit
    arrives, with the streams' own fallback read put out of reach (before: only that
    read, a second after each commit, found them)."""
    monkeypatch.setattr(_sse, "RECHECK_S", 3600.0)
    async with _beside_another_process(tmp_path) as (served, other, tail, nursery):
        nursery.start_soon(tail.poll)
        async with closing(session_events(served, tail, "s", 0)) as events:
            for seq in range(4):
                await other.append(
                    "s", [NewEvent(type="t", body=b"{}", recorded_at=seq)], expected_seq=seq
                )
                with trio.fail_after(30):
                    event = await anext(events)
                assert event.seq == seq


async def test_this_processs_commit_is_held_by_the_tail_as_the_append_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tail takes this process's commits as the writer delivers them (before the
    appender resumes), a scheduler pass before its follow could; a commit that does not
    follow what it holds of a session (another process's came in between) is left to the
    follow: every stream still gets each event once, in order."""
    monkeypatch.setattr(_sse, "RECHECK_S", 3600.0)  # no fallback read hides a lost wake-up

    def new(seq: int) -> list[NewEvent]:
        return [NewEvent(type="t", body=b"{}", recorded_at=seq)]

    async with (
        _beside_another_process(tmp_path) as (served, other, tail, _),
        closing(session_events(served, tail, "s", 0)) as events,
    ):
        for seq in range(3):
            await served.append("s", new(seq), expected_seq=seq)
            assert [h.event.seq for h in tail.since("s", 0) or []] == list(range(seq + 1))
            with trio.fail_after(30):
                assert (await anext(events)).seq == seq
        await other.append("s", new(3), expected_seq=3)
        await served.append("s", new(4), expected_seq=4)
        assert [h.event.seq for h in tail.since("s", 0) or []] == [0, 1, 2]  # not 4 yet
        with trio.fail_after(30):
            assert [(await anext(events)).seq for _ in range(2)] == [3, 4]
        await served.append("s", new(5), expected_seq=5)
        assert [h.event.seq for h in tail.since("s", 3) or []] == [3, 4, 5]
        with trio.fail_after(30):
            assert (await anext(events)).seq == 5
        await trio.testing.wait_all_tasks_blocked()
        assert not tail._early  # the follow passed every one taken early


async def test_the_tail_polls_only_while_a_stream_is_followed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wakes = 0

    class Counted(MemoryStore):
        def wake_followers(self) -> None:
            nonlocal wakes
            wakes += 1

    tail = Tail(Counted())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail.poll)
        await trio.sleep(10)
        assert wakes == 0  # nobody follows: no reads
        with tail.watching("s"):
            await trio.sleep(1)
        followed = wakes
        assert 1 / WATCHED_POLL_S - 2 <= followed <= 1 / WATCHED_POLL_S + 1
        await trio.sleep(10)
        assert wakes <= followed + 1
        nursery.cancel_scope.cancel()


async def suspended_and_held(service: Service) -> tuple[str, int]:
    """A session submitted and suspended, every event of it held by the tail (which
    reads the commits in its own time): its id and head seq."""
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    head = (await service.store.head(session)).seq  # type: ignore[union-attr]
    with trio.fail_after(30):
        while len(service.tail.since(session, 0) or ()) <= head:  # noqa: ASYNC110
            await trio.sleep(0.01)
    return session, head


async def test_a_sessions_configuration_is_read_once_for_its_streams(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each stream hides the session's scripted model path (``hidden_path``), from the
    session's first events: taken from the tail when it holds them (no read), else read
    once per session by the tail, not once per connection."""
    session, head = await suspended_and_held(service)
    firsts: list[int] = []
    real_read = service.store.read

    def counted(stream: str, *, from_seq: int = 0, **kw: Any) -> Any:
        if stream == session and kw.get("to_seq") == 2:
            firsts.append(from_seq)  # session_config's read
        return real_read(stream, from_seq=from_seq, **kw)

    monkeypatch.setattr(service.store, "read", counted)
    async with service.client("victor") as client:
        for held in (True, False):
            if not held:  # as if the session had begun before the server started
                service.tail._drop(session)
                service.tail._hidden.clear()
            for _ in range(4):  # one after the other: each a new connection
                async with follow(client, f"/api/sessions/{session}/stream") as events:
                    with trio.fail_after(30):
                        while (await events.receive())[0] < head:
                            pass
            assert len(firsts) == (0 if held else 1)


async def test_new_followers_of_a_session_the_tail_saw_begin_read_nothing(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session begun since the server started is held by the tail from its first
    event: five new streams take its events from there, not from the store, and each
    event's SSE frame is encoded once for all of them (before: a read per connection
    and an encoding per event per stream)."""
    session, head = await suspended_and_held(service)
    reads: list[int] = []
    real_read = service.store.read

    def counted(stream: str, *, from_seq: int = 0, **kw: Any) -> Any:
        if sys._getframe(1).f_globals["__name__"] == "orchestrator.service._sse":
            reads.append(from_seq)
        return real_read(stream, from_seq=from_seq, **kw)

    encoded: list[int] = []
    real_frame = _sse.sse_frame

    def frame(event: Event, hidden: str | None = None) -> bytes:
        encoded.append(event.seq)
        return real_frame(event, hidden)

    monkeypatch.setattr(service.store, "read", counted)
    monkeypatch.setattr(_sse, "sse_frame", frame)
    end = await five_followers_to_the_end(service, session, head, lambda: None)
    assert reads == []
    assert sorted(encoded) == list(range(end + 1))


async def test_the_tail_holds_sessions_nobody_follows_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the tail holds of sessions nobody follows stays under ``HELD_BYTES``, the
    least recently committed to dropped first; a stream of a dropped session reads the
    store and still gets each event once, in order; a session begun before the tail
    (its first event unseen) is not held, and neither are lease streams."""
    monkeypatch.setattr(_sse, "HELD_BYTES", 3 * (768 + 4))  # three events of b"{}"
    store = MemoryStore()
    tail = Tail(store)

    async def add(stream: str, n: int) -> None:
        head = await store.head(stream)
        new = [NewEvent(type="t", body=b"{}", recorded_at=0) for _ in range(n)]
        await store.append(stream, new, expected_seq=0 if head is None else head.seq + 1)

    await add("before", 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(tail.run)
        await add("before", 1)
        await add("lease/a", 1)
        for stream in ("a", "b", "c"):
            await add(stream, 1)
        with trio.fail_after(30):
            while tail.since("c", 0) is None:  # noqa: ASYNC110 - the tail reads in its time
                await trio.sleep(0.01)
        assert tail.held() == _sse.HELD_BYTES
        assert tail.since("before", 0) is None and tail.since("lease/a", 0) is None
        await add("a", 1)  # "a" is held again most recently: "b" is dropped
        with trio.fail_after(30):
            while len(tail.since("a", 0) or ()) < 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert tail.since("b", 0) is None and tail.since("c", 0) is not None
        assert tail.held() <= _sse.HELD_BYTES
        async with closing(session_events(store, tail, "b", 0)) as events:
            assert [(await anext(events)).seq] == [0]
        nursery.cancel_scope.cancel()
    assert tail.kept() == set()


@pytest.mark.parametrize("body", [b"{not json", None])
async def test_an_archive_whose_tombstones_cannot_be_read_leaves_the_tail_going(
    body: bytes | None,
) -> None:
    """A ``log.archived`` whose body does not decode, or whose tombstone list is not in
    the log: the tail takes no stream for gone and goes on with the next commits
    (``log verify`` is where such a log is reported)."""
    store = MemoryStore()
    tail = Tail(store)
    if body is None:  # a well-formed body naming a list the log does not hold
        body = json.dumps(
            {"by": "x", "before": 0, "checkpoint": "c", "file": "f", "tombstones": "0" * 64,
             "groups": 1, "streams": 1, "events": 1, "skipped": 0}
        ).encode()  # fmt: skip
    archived = NewEvent(type="log.archived", body=body, recorded_at=0)
    event = NewEvent(type="t", body=b"{}", recorded_at=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(tail.run)
        await store.append("a", [event], expected_seq=0)
        await store.append(MAINTENANCE_STREAM, [archived], expected_seq=0)
        await store.append("a", [event], expected_seq=1)
        with trio.fail_after(30):
            while len(tail.since("a", 0) or ()) < 2:  # noqa: ASYNC110 - the tail reads in its time
                await trio.sleep(0.01)
        assert not tail.gone("a")
        nursery.cancel_scope.cancel()
