"""The SQLite store against hostile databases, other processes, a full disk."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest
import trio

from eventlog import (
    ConcurrencyError,
    DatabaseFormatError,
    DatabaseFullError,
    DatabaseLockedError,
    NewEvent,
    ReadOnlyDatabaseError,
    StoreError,
    open_sqlite_store,
    verify,
)

ROOT = Path(__file__).parents[2]


def ev(i: int, size: int = 10) -> NewEvent:
    return NewEvent(type="t", body=b'{"p":"%s","i":%d}' % (b"x" * size, i), recorded_at=i)


async def test_not_a_sqlite_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.db"
    bad.write_bytes(b"this is not a database at all, just text\n" * 10)
    with pytest.raises(DatabaseFormatError, match="not a SQLite database"):
        async with open_sqlite_store(bad):
            pass
    assert bad.read_bytes().startswith(b"this is not")
    with pytest.raises(DatabaseFormatError, match="not a regular file"):
        async with open_sqlite_store(tmp_path):
            pass
    with pytest.raises(StoreError, match="does not exist"):
        async with open_sqlite_store(tmp_path / "no" / "x.db"):
            pass
    with pytest.raises(StoreError, match="no such file"):
        async with open_sqlite_store(tmp_path / "absent.db", readonly=True):
            pass


async def test_a_newer_format_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE eventlog_meta SET value = '9' WHERE key = 'format_version'")
    conn.close()
    for readonly in (False, True):
        with pytest.raises(DatabaseFormatError, match="format version 9 is newer"):
            async with open_sqlite_store(db, readonly=readonly):
                pass
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM events").fetchone() == (1,)
    conn.close()


async def test_unknown_tables_are_tolerated_and_untouched(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("CREATE TABLE skills_index (name TEXT, hash TEXT)")
        conn.execute("INSERT INTO skills_index VALUES ('pdf', 'abc')")
    conn.close()
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
    async with open_sqlite_store(db) as store:
        assert (await verify(store)).ok
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT * FROM skills_index").fetchall() == [("pdf", "abc")]
    conn.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
async def test_read_only_file_gives_a_clear_error(tmp_path: Path) -> None:  # pragma: no cover
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
    db.chmod(0o444)
    tmp_path.chmod(0o555)  # noqa: ASYNC240 - test setup
    try:
        with pytest.raises(ReadOnlyDatabaseError):
            async with open_sqlite_store(db):
                pass
    finally:
        tmp_path.chmod(0o755)  # noqa: ASYNC240 - test teardown


async def test_writing_through_a_read_only_store_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
    async with open_sqlite_store(db, readonly=True) as ro:
        with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
            await ro.append("s", [ev(1)], expected_seq=1)
        assert [e.seq async for e in ro.read("s")] == [0]


async def test_locked_by_another_writer_times_out_clearly(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        async with open_sqlite_store(db, busy_timeout=0.2) as store:
            pass
    except DatabaseLockedError as e:
        assert "locked by another writer" in str(e)
    else:  # the schema needed no write: the append must then time out
        async with open_sqlite_store(db, busy_timeout=0.2) as store:
            with pytest.raises(DatabaseLockedError, match="locked by another writer"):
                await store.append("s", [ev(1)], expected_seq=1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(1)], expected_seq=1)
        assert (await verify(store)).events == 2


async def test_disk_full_fails_that_append_only_and_keeps_the_rest(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
    pages = os.path.getsize(db) // 4096 + 4  # noqa: ASYNC240 - test setup
    async with open_sqlite_store(db, max_pages=pages) as store:
        with pytest.raises(DatabaseFullError, match="full"):
            await store.append("s", [ev(i, 2000) for i in range(1, 200)], expected_seq=1)
        await store.append("s", [ev(1)], expected_seq=1)  # small ones still fit
    async with open_sqlite_store(db) as store:
        assert [e.seq async for e in store.read("s")] == [0, 1]
        assert (await verify(store)).ok


async def test_group_commit_fails_only_the_conflicting_append(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "x.db") as store:
        await store.append("s", [ev(0)], expected_seq=0)
        results: dict[str, str] = {}

        async def one(name: str, stream: str, seq: int) -> None:
            try:
                await store.append(stream, [ev(seq)], expected_seq=seq)
                results[name] = "ok"
            except ConcurrencyError:
                results[name] = "conflict"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "good1", "t", 0)
            nursery.start_soon(one, "stale", "s", 0)
            nursery.start_soon(one, "good2", "s", 1)
            nursery.start_soon(one, "good3", "u", 0)
        assert results == {"good1": "ok", "stale": "conflict", "good2": "ok", "good3": "ok"}


async def test_a_stream_written_by_another_process_is_seen_and_followed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "x.db"
    script = (
        "import sys, trio, eventlog as el\n"
        "async def main():\n"
        "    async with el.open_sqlite_store(sys.argv[1]) as s:\n"
        "        for i in range(3):\n"
        "            e = el.NewEvent(type='t', body=b'{}', recorded_at=i)\n"
        "            await s.append('other', [e], expected_seq=i)\n"
        "trio.run(main)\n"
    )
    async with open_sqlite_store(db, poll_interval=0.05) as store:
        await store.append("mine", [ev(0)], expected_seq=0)
        seen: list[str] = []
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def tail() -> None:
                    async for e in store.follow():
                        seen.append(f"{e.stream}:{e.seq}")
                        if len(seen) == 4:
                            nursery.cancel_scope.cancel()

                nursery.start_soon(tail)
                env = {**os.environ, "PYTHONPATH": str(ROOT)}
                await trio.run_process([sys.executable, "-c", script, str(db)], env=env)
        assert seen == ["mine:0", "other:0", "other:1", "other:2"]


async def test_a_follow_woken_by_this_processs_commit_reads_nothing(tmp_path: Path) -> None:
    # What this process commits reaches its follows from memory; a gap (a commit by
    # another connection before ours) and a wake_followers() read the file, in order.
    db = tmp_path / "x.db"
    async with open_sqlite_store(db, poll_interval=60) as store, open_sqlite_store(db) as other:
        reads = 0
        fetch = store._fetch_from

        async def counted(position: int) -> list[object]:
            nonlocal reads
            reads += 1
            return await fetch(position)

        store._fetch_from = counted  # type: ignore[method-assign]
        seen_in, seen_out = trio.open_memory_channel[str](100)

        async def tail() -> None:
            async for e in store.follow():
                await seen_in.send(f"{e.stream}:{e.seq}@{e.position}")

        async def next_seen(n: int) -> list[str]:
            return [await seen_out.receive() for _ in range(n)]

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await store.append("a", [ev(0)], expected_seq=0)
                nursery.start_soon(tail)
                assert await next_seen(1) == ["a:0@1"]  # the first look: a read
                await store.append("a", [ev(1)], expected_seq=1)
                await store.append("a", [ev(2)], expected_seq=2)
                assert await next_seen(2) == ["a:1@2", "a:2@3"]
                assert reads == 1
                await other.append("b", [ev(0)], expected_seq=0)
                await store.append("a", [ev(3)], expected_seq=3)
                assert await next_seen(2) == ["b:0@4", "a:3@5"]
                assert reads == 2
                await other.append("b", [ev(1)], expected_seq=1)
                store.wake_followers()
                assert await next_seen(1) == ["b:1@6"]
                assert reads == 3
                nursery.cancel_scope.cancel()


async def test_a_corrupt_page_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(i, 500) for i in range(50)], expected_seq=0)
    data = bytearray(db.read_bytes())
    data[4096 * 2 : 4096 * 2 + 200] = b"\xff" * 200
    db.write_bytes(bytes(data))
    with pytest.raises(DatabaseFormatError, match="corrupt"):
        async with open_sqlite_store(db, readonly=True) as store:
            await verify(store)


async def test_bad_synchronous_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="synchronous"):
        async with open_sqlite_store(tmp_path / "x.db", synchronous="OFF"):
            pass


async def test_appends_see_commits_by_another_connection(tmp_path: Path) -> None:
    # The writer remembers heads between batches; a commit by anyone else must make it
    # look again (PRAGMA data_version): the right expected_seq succeeds at once and a
    # stale one is a conflict, not a fork.
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store, open_sqlite_store(db) as other:
        await store.append("s", [ev(0)], expected_seq=0)
        await other.append("s", [ev(1)], expected_seq=1)
        (e,) = await store.append("s", [ev(2)], expected_seq=2)
        assert e.position == 3
        await other.append("s", [ev(3)], expected_seq=3)
        with pytest.raises(ConcurrencyError):
            await store.append("s", [ev(3)], expected_seq=3)
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute(
                "INSERT INTO events (stream, seq, position, type, recorded_at, body, "
                "prev_hash, hash) SELECT 's', 4, 10, 't', 4, x'7b7d', hash, hash "
                "FROM events WHERE seq = 3"
            )
        finally:
            conn.close()
        (e,) = await store.append("s", [ev(5)], expected_seq=5)
        assert e.position == 11


async def test_appends_after_a_write_through_the_writer_see_it(tmp_path: Path) -> None:
    # call_in_writer shares the writer's connection, which data_version does not see.
    async with open_sqlite_store(tmp_path / "x.db") as store:
        await store.append("s", [ev(0)], expected_seq=0)

        def sneak(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO events (stream, seq, position, type, recorded_at, body, "
                "prev_hash, hash) SELECT 's', 1, 5, 't', 1, x'7b7d', hash, hash "
                "FROM events WHERE seq = 0"
            )

        await store.call_in_writer(sneak)
        (e,) = await store.append("s", [ev(2)], expected_seq=2)
        assert (e.seq, e.position) == (2, 6)
        with pytest.raises(ConcurrencyError):
            await store.append("s", [ev(2)], expected_seq=2)


async def test_a_failed_batch_leaves_no_trace_in_later_appends(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0, 2000)], expected_seq=0)
    pages = sqlite3.connect(db).execute("PRAGMA page_count").fetchone()[0]
    async with open_sqlite_store(db, max_pages=pages + 2) as store:
        with pytest.raises(DatabaseFullError):
            await store.append("s", [ev(i, 2000) for i in range(1, 40)], expected_seq=1)
        (e,) = await store.append("s", [ev(1)], expected_seq=1)
        assert (e.seq, e.position) == (1, 2)
        assert (await verify(store)).ok


async def test_a_cancelled_append_still_learns_its_outcome(tmp_path: Path) -> None:
    # Once queued the write happens, so the wait for it is not cancellable: the caller
    # gets its events and the cancellation at its next checkpoint.
    async with open_sqlite_store(tmp_path / "x.db") as store:
        seqs: list[int] = []
        with trio.CancelScope() as scope:
            scope.cancel()
            seqs.extend(e.seq for e in await store.append("s", [ev(0)], expected_seq=0))
            await trio.lowlevel.checkpoint()
            seqs.append(-1)  # not reached
        assert scope.cancelled_caught
        assert seqs == [0]
        with trio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(ConcurrencyError):
                await store.append("s", [ev(0)], expected_seq=0)
        head = await store.head("s")
        assert head is not None and head.seq == 0


async def test_a_burst_of_reads_leaves_few_reader_connections_open(tmp_path: Path) -> None:
    """Each reader connection holds a page cache: after a burst of concurrent reads the
    store keeps MAX_IDLE_READERS of them, not one per thread that read (a server's
    memory crept upwards with every burst)."""
    from eventlog._sqlite import MAX_IDLE_READERS

    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
        release = trio.Event()

        async def read_once() -> None:
            def slow(conn: sqlite3.Connection) -> None:
                trio.from_thread.run(release.wait)  # every reader open at once

            await store._read(slow, "reading")

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(read_once)
            await trio.sleep(0.5)
            release.set()
        # (Not counted in descriptors: SQLite keeps a closed connection's descriptor
        # while others in the process hold locks on the file, and reuses it.)
        assert len(store._idle) == MAX_IDLE_READERS
        assert [e.seq async for e in store.read("s")] == [0]


async def test_a_new_log_and_its_wal_shm_and_snapshot_are_private(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    old = os.umask(0o022)  # the common default, under which sqlite3 would make 0644
    try:
        async with open_sqlite_store(db) as store:
            await store.append("s", [ev(0)], expected_seq=0)
            files = [db, db.with_name("x.db-wal"), db.with_name("x.db-shm")]
            assert {oct(p.stat().st_mode & 0o777) for p in files} == {"0o600"}
            await store.snapshot_to(tmp_path / "copy.db")
        assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
        other = tmp_path / "chosen.db"  # an existing file keeps the mode its owner chose
        other.touch(mode=0o640)
        other.chmod(0o640)
        async with open_sqlite_store(other) as store:
            await store.append("s", [ev(0)], expected_seq=0)
        assert other.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


async def test_appenders_cancelled_while_the_writer_is_busy_still_learn_their_outcome(
    tmp_path: Path,
) -> None:
    """Eight appenders, all cancelled while the writer is busy: each append returns
    what it committed (never cancelled), and each caller's cancellation acts at its
    next checkpoint."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        outcomes: dict[str, int] = {}
        started = trio.Event()

        async def append(stream: str, scope: trio.CancelScope) -> None:
            with scope:
                started.set()
                stored = await store.append(
                    stream, [NewEvent(type="t", body=b"{}", recorded_at=1)], expected_seq=0
                )
                outcomes[stream] = stored[0].seq
                await trio.lowlevel.checkpoint()
                outcomes[stream] = -1  # pragma: no cover - the checkpoint raises

        scopes = [trio.CancelScope() for _ in range(8)]
        async with trio.open_nursery() as nursery:
            for i, scope in enumerate(scopes):
                nursery.start_soon(append, f"s{i}", scope)
            await started.wait()
            for scope in scopes:
                scope.cancel()
        assert outcomes == {f"s{i}": 0 for i in range(8)}
        assert all(scope.cancelled_caught for scope in scopes)
        assert [len([e async for e in store.read(f"s{i}")]) for i in range(8)] == [1] * 8


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
async def test_opening_and_closing_a_store_leaves_no_descriptor_open(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async with open_sqlite_store(tmp_path / "log.db") as store:  # warm: trio's own fds
        await store.append("s", [ev(0)], expected_seq=0)
    before = open_fds()
    for seq in range(1, 11):
        async with open_sqlite_store(tmp_path / "log.db") as store:
            await store.append("s", [ev(seq)], expected_seq=seq)
    assert open_fds() == before
