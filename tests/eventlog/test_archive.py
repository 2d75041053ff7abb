"""Retention on every store: streams move whole into a signed archive, tombstones stay,
and verify, checkpoints and the archive itself keep proving what was there."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from eventlog import (
    MAINTENANCE_STREAM,
    ArchiveError,
    BlobNotFoundError,
    CheckpointHead,
    EventStore,
    MemoryStore,
    NewEvent,
    SqliteStore,
    archive_streams,
    closing,
    load_archive,
    make_checkpoint,
    verify,
)
from eventlog._checkpoint import public_hex

Make = Callable[..., list[NewEvent]]


async def heads_of(store: EventStore, *streams: str) -> list[CheckpointHead]:
    out = []
    for s in streams:
        head = await store.head(s)
        assert head is not None
        out.append(CheckpointHead(stream=s, seq=head.seq, hash=head.hash))
    return out


async def fill(store: EventStore, make: Make) -> None:
    for i, stream in enumerate(["old-1", "old-2", "live"]):
        blob = b"blob of %d" % i
        digest = msgspec.json.encode(__import__("hashlib").sha256(blob).hexdigest())
        events = make(3, start=10 * i)
        events.append(NewEvent(type="test.blob", body=b'{"d":%s}' % digest, recorded_at=5))
        await store.append(stream, events, expected_seq=0, blobs=[blob])


async def run_archive(
    store: EventStore, heads: list[CheckpointHead], out: Path, key: Ed25519PrivateKey
) -> object:
    return await archive_streams(
        store, heads, out=out, key=key, by="tester@host", before=10**18, clock=time.time_ns
    )


async def test_archived_streams_leave_tombstones_and_the_log_still_verifies(
    store: EventStore, make: Make, tmp_path: Path
) -> None:
    await fill(store, make)
    key = Ed25519PrivateKey.generate()
    before = await make_checkpoint(store, key, previous=None, clock=lambda: 1)
    heads = await heads_of(store, "old-1", "old-2")
    result = await run_archive(store, heads, tmp_path / "a.jsonl", key)
    assert result.archived == ("old-1", "old-2") and result.events == 8  # type: ignore[attr-defined]
    assert {s.stream for s in await store.streams()} == {"live", MAINTENANCE_STREAM}
    stones = await store.tombstones()  # type: ignore[attr-defined]
    assert [(t.stream, t.length, t.head_hash) for t in stones] == [
        (h.stream, h.seq + 1, h.hash) for h in heads
    ]
    trusted = {public_hex(key.public_key())}
    report = await verify(store, checkpoints=[before], keys=trusted)
    assert report.ok, report.faults
    after = await make_checkpoint(store, key, previous=before, clock=lambda: 2)
    assert (await verify(store, checkpoints=[before, after], keys=trusted)).ok
    # The archive proves itself: chains, blobs, and a checkpoint over exactly those heads.
    archived, cp = await load_archive(tmp_path / "a.jsonl")
    assert cp.id == stones[0].checkpoint and list(cp.heads) == heads
    assert (await verify(archived, checkpoints=[cp], keys=trusted)).ok
    assert [e.hash async for e in archived.read("old-2")][-1] == heads[1].hash


async def test_a_follow_past_the_archived_last_events_sees_what_comes_after(
    store: EventStore, make: Make, tmp_path: Path
) -> None:
    """Archiving the log's last events frees no position: ``log.archived`` and the
    appends after it come past every position a follow has seen (they took the archived
    events' positions again on SQLite, so the service's tail never saw them)."""
    await fill(store, make)
    last = [e.position async for e in store.read_all()][-1]
    seen: list[tuple[str, int]] = []
    async with trio.open_nursery() as nursery:

        async def follow() -> None:
            async with closing(store.follow(from_position=last + 1)) as events:
                async for event in events:
                    seen.append((event.stream, event.position))

        nursery.start_soon(follow)
        key = Ed25519PrivateKey.generate()
        await run_archive(store, await heads_of(store, "live"), tmp_path / "a.jsonl", key)
        await store.append("next", make(1), expected_seq=0)
        with trio.fail_after(30):
            while len(seen) < 2:  # noqa: ASYNC110 - a follow reads in its own time
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert [stream for stream, _ in seen] == [MAINTENANCE_STREAM, "next"]
    assert [position for _, position in seen] == [last + 1, last + 2]


async def test_a_group_that_moved_after_it_was_chosen_is_skipped_whole(
    store: EventStore, make: Make, tmp_path: Path
) -> None:
    await fill(store, make)
    key = Ed25519PrivateKey.generate()
    heads = await heads_of(store, "old-1", "old-2")
    await store.append("old-2", make(1, start=99), expected_seq=4)  # became runnable
    result = await run_archive(store, heads, tmp_path / "a.jsonl", key)
    assert result.archived == ("old-1",) and result.skipped == ("old-2",)  # type: ignore[attr-defined]
    # Moved between the file and the commit: the commit skips it just the same.
    heads = await heads_of(store, "old-2", "live")
    original = store.commit_archive  # type: ignore[attr-defined]

    async def racing(commit: object) -> object:
        await store.append("old-2", make(1, start=98), expected_seq=5)
        return await original(commit)

    store.commit_archive = racing  # type: ignore[attr-defined]
    result = await run_archive(store, heads, tmp_path / "b.jsonl", key)
    assert result.archived == ("live",) and result.skipped == ("old-2",)  # type: ignore[attr-defined]
    assert await store.head("old-2") is not None
    assert await store.get_blob(digest_of(b"blob of 1")) == b"blob of 1"  # old-2 names it
    with pytest.raises(BlobNotFoundError):
        await store.get_blob(digest_of(b"blob of 2"))  # live's, archived
    assert (await verify(store)).ok


async def test_a_rerun_with_the_same_file_completes_or_does_nothing(
    store: EventStore, make: Make, tmp_path: Path
) -> None:
    await fill(store, make)
    key = Ed25519PrivateKey.generate()
    out = tmp_path / "a.jsonl"
    heads = await heads_of(store, "old-1")
    real = store.commit_archive  # type: ignore[attr-defined]

    async def crash(commit: object) -> object:
        raise KeyboardInterrupt  # the process died after the file, before the commit

    store.commit_archive = crash  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt):
        await run_archive(store, heads, out, key)
    assert out.exists() and await store.head("old-1") is not None
    store.commit_archive = real  # type: ignore[attr-defined]
    first = await run_archive(store, [], out, key)
    assert first.archived == ("old-1",)  # type: ignore[attr-defined]
    again = await run_archive(store, [], out, key)
    assert again.already and again.events == 4  # type: ignore[attr-defined]
    with pytest.raises(ArchiveError, match="not this key's archive"):
        await run_archive(store, [], out, Ed25519PrivateKey.generate())
    assert len([e async for e in store.read(MAINTENANCE_STREAM)]) == 1


async def test_tampering_with_tombstones_is_a_fault(
    store: EventStore, make: Make, tmp_path: Path
) -> None:
    if not isinstance(store, (MemoryStore, SqliteStore)):
        pytest.skip("edited by hand through sqlite3 or the memory store's dict")
    await fill(store, make)
    key = Ed25519PrivateKey.generate()
    await run_archive(store, await heads_of(store, "old-1"), tmp_path / "a.jsonl", key)
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE eventlog_tombstones SET length = 99")
    else:
        t = store._tombstones["old-1"]
        store._tombstones["old-1"] = msgspec.structs.replace(t, length=99)
    faults = (await verify(store)).faults
    assert [f.kind for f in faults] == ["tombstone"] and faults[0].stream == "old-1"


async def test_a_tampered_archive_is_refused_or_fails_its_checkpoint(
    make: Make, tmp_path: Path
) -> None:
    store = MemoryStore()
    await fill(store, make)
    key = Ed25519PrivateKey.generate()
    out = tmp_path / "a.jsonl"
    await run_archive(store, await heads_of(store, "old-1"), out, key)
    lines = out.read_bytes().splitlines(keepends=True)
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"".join([lines[0], lines[1].replace(b'"i":0', b'"i":7'), *lines[2:]]))
    with pytest.raises(ArchiveError, match="hash does not match"):
        await load_archive(edited)
    # Cut the last event and its line count: the chain holds, the signed head does not.
    cut = tmp_path / "cut.jsonl"
    end = lines[-1].replace(b'"events":4', b'"events":3')
    cut.write_bytes(b"".join([*lines[:-2], end]))
    archived, cp = await load_archive(cut)
    report = await verify(archived, checkpoints=[cp], keys={public_hex(key.public_key())})
    assert [f.kind for f in report.faults] == ["truncated"]
    export = tmp_path / "plain.jsonl"
    export.write_bytes(b"".join([*lines[:-1], b'{"end":{"events":4}}\n']))
    with pytest.raises(ArchiveError, match="not an archive"):
        await load_archive(export)


def digest_of(data: bytes) -> str:
    return __import__("hashlib").sha256(data).hexdigest()


async def test_blobs_only_archived_streams_named_go_the_shared_ones_stay(
    store: EventStore, make: Make, tmp_path: Path
) -> None:
    await fill(store, make)
    shared = msgspec.json.encode(digest_of(b"blob of 0"))  # old-1's blob, named by live too
    await store.append("live", [NewEvent(type="test.blob", body=b'{"d":%s}' % shared,
                                         recorded_at=6)], expected_seq=4)  # fmt: skip
    heads = await heads_of(store, "old-1", "old-2")
    result = await run_archive(store, heads, tmp_path / "a.jsonl", Ed25519PrivateKey.generate())
    assert (result.blobs, result.blob_bytes) == (1, len(b"blob of 1"))  # type: ignore[attr-defined]
    assert await store.get_blob(digest_of(b"blob of 0")) == b"blob of 0"
    assert await store.get_blob(digest_of(b"blob of 2")) == b"blob of 2"
    with pytest.raises(BlobNotFoundError):
        await store.get_blob(digest_of(b"blob of 1"))
    archived, _ = await load_archive(tmp_path / "a.jsonl")  # the file carries both
    assert {d async for d, _ in archived.read_blobs()} >= {digest_of(b"blob of %d" % i)
                                                           for i in (0, 1)}  # fmt: skip


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_an_append_naming_a_blob_while_the_archive_drops_it_stores_it_again(
    kind: str, make: Make, tmp_path: Path, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The race: another writer (its own store, its own connection) appends an event
    naming a blob the archive is about to drop. The archive's reference scan and
    deletion hold the writers' lock, so that append waits and then stores the blob it
    carries again: after both, the blob is there and the log verifies."""
    import threading

    import trio

    import eventlog._postgres_writer as pg_writer
    import eventlog._sqlite_writer as sqlite_writer
    from eventlog import open_store

    url = str(tmp_path / "log.db") if kind == "sqlite" else request.getfixturevalue("pg_dsn")
    module = sqlite_writer if kind == "sqlite" else pg_writer
    blob = b"blob of 1"  # old-2's: named by nothing live, so the archive drops it
    named = b'{"d":%s}' % msgspec.json.encode(digest_of(blob))
    appended: list[str] = []

    async def other_writer() -> None:
        async with open_store(url) as other:
            new = [NewEvent(type="test.blob", body=named, recorded_at=7)]
            await other.append("live", new, expected_seq=4, blobs=[blob])
        appended.append("done")

    original = module.unreferenced

    def scan_then_race(candidates: Any, bodies: Any) -> list[str]:
        dead = original(candidates, bodies)
        assert digest_of(blob) in dead
        racer.start()
        time.sleep(1.0)  # the other writer is blocked on the lock all along
        assert appended == []
        return dead

    racer = threading.Thread(target=trio.run, args=(other_writer,))
    monkeypatch.setattr(module, "unreferenced", scan_then_race)
    async with open_store(url) as store:
        await fill(store, make)
        heads = await heads_of(store, "old-1", "old-2")
        key = Ed25519PrivateKey.generate()
        result = await run_archive(store, heads, tmp_path / "a.jsonl", key)
        assert result.blobs == 2  # type: ignore[attr-defined]
        await trio.to_thread.run_sync(racer.join, 30)
        assert appended == ["done"]
        assert await store.get_blob(digest_of(blob)) == blob
        assert [e.body async for e in store.read("live")][-1] == named
        assert (await verify(store)).ok


@pytest.mark.parametrize("another_archive", [False, True])
async def test_an_append_between_the_scan_and_the_commit_keeps_its_blob(
    store: EventStore, make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    another_archive: bool,
) -> None:  # fmt: skip
    """The reference scan runs before the commit without the lock, and the commit reads
    only positions after it under the lock. An event naming a candidate that commits in
    between is read there. When another archive commits in between, the commit sees the
    maintenance head moved and reads everything (once needed: that archive deleted the
    last events, whose positions later appends took again; none is reused now)."""
    import eventlog._archive as archive_module

    await fill(store, make)
    await store.append("tail", make(3, start=90), expected_seq=0)  # the highest positions
    blob = b"blob of 1"  # old-2's: named by nothing else when the scan runs
    named = b'{"d":%s}' % msgspec.json.encode(digest_of(blob))
    original = archive_module.scan_references

    async def scan_then_interleave(*args: Any) -> Any:
        mark, found = await original(*args)
        if args[1][0].stream == "tail":
            return mark, found  # the other archive, run from inside this one
        if another_archive:
            tail = await heads_of(store, "tail")
            await run_archive(store, tail, tmp_path / "t.jsonl", Ed25519PrivateKey.generate())
        new = [NewEvent(type="test.blob", body=named, recorded_at=7)]
        appended = await store.append("live", new, expected_seq=4)  # the blob is stored
        assert appended[0].position > mark.position  # no store hands a position out twice
        return mark, found

    monkeypatch.setattr(archive_module, "scan_references", scan_then_interleave)
    heads = await heads_of(store, "old-1", "old-2")
    result = await run_archive(store, heads, tmp_path / "a.jsonl", Ed25519PrivateKey.generate())
    assert result.archived == ("old-1", "old-2")  # type: ignore[attr-defined]
    assert result.blobs == 1  # type: ignore[attr-defined]  # old-1's; old-2's is named
    assert await store.get_blob(digest_of(blob)) == blob
    with pytest.raises(BlobNotFoundError):
        await store.get_blob(digest_of(b"blob of 0"))
