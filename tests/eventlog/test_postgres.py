"""The PostgreSQL store against a real server: writers in two "processes", schema
migrations, hostile databases and faults (killed backends, restarts, timeouts)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg
import pytest
import trio

import eventlog._postgres
from eventlog import (
    ConcurrencyError,
    DatabaseFormatError,
    NewEvent,
    Snapshot,
    StoreError,
    blob_digest,
    event_hash,
    open_postgres_store,
    open_store,
    verify,
)
from eventlog._postgres_db import SCHEMA_VERSION, connect, migrate, redact
from eventlog._types import closing

Make = Callable[..., list[NewEvent]]


def one(i: int) -> list[NewEvent]:
    return [NewEvent(type="t", body=b'{"i":%d}' % i, recorded_at=i)]


def sql(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement.encode(), params)
        return cur.fetchall() if cur.description else []


async def wait_for(dsn: str, condition: str) -> int:
    """The pid of the skillog writer once ``condition`` holds for it in pg_stat_activity."""
    with trio.fail_after(10):
        while True:
            rows = sql(
                dsn,
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'skillog writer' "
                f"AND datname = current_database() AND {condition}",
            )
            if rows:
                return int(rows[0][0])
            await trio.sleep(0.02)


# -- two writers, one database --------------------------------------------------------


async def test_two_writers_racing_on_one_stream_never_fork(pg_dsn: str, make: Make) -> None:
    outcomes: list[str] = []
    async with open_postgres_store(pg_dsn) as a, open_postgres_store(pg_dsn) as b:

        async def racer(i: int) -> None:
            try:
                await (a if i % 2 else b).append("race", make(1, start=i), expected_seq=0)
                outcomes.append("ok")
            except ConcurrencyError:
                outcomes.append("conflict")

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(racer, i)
        assert sorted(outcomes) == ["conflict"] * 19 + ["ok"]
        # Each writer's remembered heads must notice the other's appends.
        for seq in range(1, 11):
            await (a if seq % 2 else b).append("race", make(1, start=seq), expected_seq=seq)
        with pytest.raises(ConcurrencyError):
            await a.append("race", make(1), expected_seq=10)
        events = [e async for e in b.read_all()]
        assert [e.seq for e in events] == list(range(11))
        assert [e.position for e in events] == sorted({e.position for e in events})
        assert (await verify(a)).ok


async def test_follow_wakes_on_notify_from_another_writer(pg_dsn: str, make: Make) -> None:
    seen: list[tuple[str, int]] = []
    async with open_postgres_store(pg_dsn) as writer:
        await writer.append("s", make(1), expected_seq=0)
        async with open_postgres_store(pg_dsn, readonly=True) as reader:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:

                    async def consume() -> None:
                        async for e in reader.follow():
                            seen.append((e.stream, e.seq))
                            if len(seen) == 4:
                                nursery.cancel_scope.cancel()

                    nursery.start_soon(consume)
                    await trio.sleep(0.2)
                    for seq in range(1, 4):
                        await writer.append("s", make(1, start=seq), expected_seq=seq)
    assert seen == [("s", 0), ("s", 1), ("s", 2), ("s", 3)]


# -- schema ---------------------------------------------------------------------------


async def test_read_only_open_refuses_an_old_schema_then_upgrade_works(pg_dsn: str) -> None:
    with connect(pg_dsn, role="test", connect_timeout=5) as conn:
        migrate(conn, pg_dsn, upto=1)
        h = event_hash("0" * 64, "t", "old", 0, 5, b"{}")
        conn.execute(
            b"INSERT INTO events VALUES (1, 'old', 0, 't', 5, '\\x7b7d', %s, %s)", ("0" * 64, h)
        )
    with pytest.raises(DatabaseFormatError, match="older than this skillog"):
        async with open_postgres_store(pg_dsn, readonly=True):
            pass  # pragma: no cover
    async with open_postgres_store(pg_dsn) as store:
        assert [e.hash async for e in store.read("old")] == [h]
        await store.append("old", one(1), expected_seq=1)
        snap = Snapshot(stream="old", name="n", seq=1, hash=h, state=b"x")
        await store.save_snapshot(snap)  # the table the upgrade added
        assert await store.load_snapshot("old", "n") == snap
        assert (await verify(store)).ok
    versions = sql(pg_dsn, "SELECT version, name FROM eventlog_migrations ORDER BY version")
    assert [v for v, _ in versions] == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("readonly", [False, True])
async def test_a_newer_schema_is_refused_clearly(pg_dsn: str, readonly: bool) -> None:
    async with open_postgres_store(pg_dsn) as store:
        await store.append("s", one(0), expected_seq=0)
    sql(pg_dsn, "INSERT INTO eventlog_migrations (version, name) VALUES (99, '0099_future')")
    with pytest.raises(DatabaseFormatError, match="newer version - upgrade skillog"):
        async with open_postgres_store(pg_dsn, readonly=readonly):
            pass  # pragma: no cover


async def test_a_foreign_events_table_is_left_alone(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE events (id serial PRIMARY KEY, what text)")
    sql(pg_dsn, "INSERT INTO events (what) VALUES ('theirs')")
    with pytest.raises(DatabaseFormatError, match="'events' but no `eventlog_migrations`") as e:
        async with open_postgres_store(pg_dsn):
            pass  # pragma: no cover
    assert "search_path" in str(e.value) and "s3cret" not in str(e.value)
    assert sql(pg_dsn, "SELECT to_regclass('eventlog_migrations')") == [(None,)]
    # The way out the message names: a schema of our own in the same database.
    sql(pg_dsn, "CREATE SCHEMA agents")
    async with open_store(pg_dsn + "?options=-csearch_path%3Dagents") as store:
        await store.append("s", one(0), expected_seq=0)
    assert sql(pg_dsn, "SELECT what FROM events") == [("theirs",)]
    assert sql(pg_dsn, "SELECT count(*) FROM agents.events") == [(1,)]


async def test_a_database_that_is_not_utf8_is_refused(pg_cluster: Any) -> None:
    pg_cluster.sql("CREATE DATABASE latin TEMPLATE template0 ENCODING 'SQL_ASCII' LOCALE 'C'")
    try:
        with pytest.raises(DatabaseFormatError, match="not UTF8"):
            async with open_postgres_store(pg_cluster.dsn("latin")):
                pass  # pragma: no cover
    finally:
        pg_cluster.sql("DROP DATABASE latin")


# -- connections ----------------------------------------------------------------------


def test_redact_drops_the_password_in_every_dsn_form() -> None:
    assert redact("postgresql://u:pw@h:5432/db?sslmode=require") == "postgresql://u@h:5432/db"
    assert redact("host=h password=pw dbname=db user=u") == "postgresql://u@h/db"
    assert redact("postgres://h/db") == "postgresql://h/db"
    assert redact("password=pw garbage") == "<unparseable PostgreSQL DSN>"


async def test_connection_refused_names_the_dsn_without_its_password(pg_cluster: Any) -> None:
    from pgcluster import free_port

    dsn = f"postgresql://skillog:hunter2@127.0.0.1:{free_port()}/nowhere"
    with trio.fail_after(20), pytest.raises(StoreError) as e:
        async with open_store(dsn):
            pass  # pragma: no cover
    message = str(e.value)
    assert "hunter2" not in message
    assert "postgresql://skillog@127.0.0.1" in message and "/nowhere" in message
    assert "cannot connect" in message and "server is running" in message


async def test_a_wrong_password_is_reported_as_such(pg_cluster: Any) -> None:
    dsn = pg_cluster.dsn(password="wrong-pass")
    for readonly in (False, True):
        with pytest.raises(StoreError, match="authentication failed") as e:
            async with open_store(dsn, readonly=readonly):
                pass  # pragma: no cover
        assert "wrong-pass" not in str(e.value)


async def test_a_backend_killed_mid_append_is_retried_exactly_once(pg_dsn: str) -> None:
    async with open_postgres_store(pg_dsn) as store:
        await store.append("s", one(0), expected_seq=0)
        with psycopg.connect(pg_dsn) as blocker:
            # Hold the table so the writer's next transaction waits inside it.
            blocker.execute(b"LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
            done: list[object] = []
            async with trio.open_nursery() as nursery:

                async def append() -> None:
                    done.append(await store.append("s", one(1), expected_seq=1, blobs=[b"b"]))

                nursery.start_soon(append)
                pid = await wait_for(pg_dsn, "wait_event_type = 'Lock'")
                sql(pg_dsn, "SELECT pg_terminate_backend(%s)", (pid,))
                await trio.sleep(0.3)
                blocker.rollback()
        assert len(done) == 1
        assert [e.seq async for e in store.read("s")] == [0, 1]
        assert await store.has_blob(blob_digest(b"b"))
        assert (await verify(store)).ok
        await store.append("s", one(2), expected_seq=2)  # the writer lives on


async def test_a_backend_killed_during_commit_never_duplicates_or_forks(pg_dsn: str) -> None:
    async with open_postgres_store(pg_dsn) as store:
        await store.append("s", one(0), expected_seq=0)
        # A deferred trigger runs inside COMMIT: the first commit sleeps there, and is
        # killed; the retry (sequences are not transactional) goes straight through.
        sql(
            pg_dsn,
            """CREATE SEQUENCE once;
            CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF nextval('once') = 1 THEN PERFORM pg_sleep(30); END IF; RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW EXECUTE FUNCTION slow_commit()""",
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(store.append, "s", one(1), expected_seq=1))
            pid = await wait_for(pg_dsn, "wait_event = 'PgSleep'")
            sql(pg_dsn, "SELECT pg_terminate_backend(%s)", (pid,))
        assert [e.seq async for e in store.read("s")] == [0, 1]
        assert (await verify(store)).ok


async def test_the_server_restarting_during_use(pg_cluster: Any, pg_dsn: str) -> None:
    seen: list[int] = []
    async with open_postgres_store(pg_dsn) as store:
        await store.append("s", one(0), expected_seq=0)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:

                async def consume() -> None:
                    async for e in store.follow():
                        seen.append(e.seq)
                        if len(seen) == 3:
                            nursery.cancel_scope.cancel()

                nursery.start_soon(consume)
                await trio.sleep(0.2)
                await trio.to_thread.run_sync(pg_cluster.down)
                await trio.to_thread.run_sync(pg_cluster.up)
                # Writer, readers and the follower all had their connections cut.
                await store.append("s", one(1), expected_seq=1)
                assert await store.head("s") is not None
                await store.append("s", one(2), expected_seq=2)
        assert seen == [0, 1, 2]
        assert (await verify(store)).ok


async def test_a_follower_waits_out_a_slow_restart(pg_cluster: Any, pg_dsn: str) -> None:
    """The server is down for a while (a restart under load): the follower keeps
    trying to listen again instead of failing, and misses nothing."""
    seen: list[int] = []
    async with open_postgres_store(pg_dsn) as store:
        await store.append("s", one(0), expected_seq=0)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:

                async def consume() -> None:
                    async for e in store.follow():
                        seen.append(e.seq)
                        if len(seen) == 2:
                            nursery.cancel_scope.cancel()

                nursery.start_soon(consume)
                await trio.sleep(0.2)
                await trio.to_thread.run_sync(pg_cluster.down)
                await trio.sleep(1.5)  # refused connections all along
                await trio.to_thread.run_sync(pg_cluster.up)
                await store.append("s", one(1), expected_seq=1)
        assert seen == [0, 1]


async def test_a_server_that_stays_down_fails_appends_cleanly(pg_cluster: Any, pg_dsn: str) -> None:
    async with open_postgres_store(pg_dsn, reconnect_timeout=0.5) as store:
        await store.append("s", one(0), expected_seq=0)
        await trio.to_thread.run_sync(pg_cluster.down)
        try:
            with pytest.raises(StoreError, match="may or may not have been committed") as e:
                await store.append("s", one(1), expected_seq=1)
            assert "s3cret" not in str(e.value)
        finally:
            await trio.to_thread.run_sync(pg_cluster.up)
        head = await store.head("s")
        assert head is not None and head.seq == 0  # it was not committed
        await store.append("s", one(1), expected_seq=1)


async def test_a_statement_timeout_fails_the_append_and_writes_nothing(pg_dsn: str) -> None:
    slow = pg_dsn + "?options=-cstatement_timeout%3D300"
    async with open_postgres_store(slow) as store:
        await store.append("s", one(0), expected_seq=0)
        with psycopg.connect(pg_dsn) as blocker:
            blocker.execute(b"LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(StoreError, match=r"cancelled the statement.*statement_timeout"):
                await store.append("s", one(1), expected_seq=1, blobs=[b"orphan"])
        assert [e.seq async for e in store.read("s")] == [0]
        assert not await store.has_blob(blob_digest(b"orphan"))
        await store.append("s", one(1), expected_seq=1)


# -- verify on the server's rows ------------------------------------------------------


@pytest.mark.parametrize(
    ("tamper", "kind", "seq"),
    [
        ("UPDATE events SET body = '\\x7b7d' WHERE stream = 'a' AND seq = 2", "modified", 2),
        ("DELETE FROM events WHERE stream = 'a' AND seq = 1", "missing", 1),
        ("UPDATE events SET hash = 'nope' WHERE stream = 'a' AND seq = 0", "malformed", 0),
        ("UPDATE blobs SET data = '\\x00'", "blob_modified", None),
    ],
)
async def test_verify_finds_tampering_in_the_server_tables(
    pg_dsn: str, make: Make, tamper: str, kind: str, seq: int | None
) -> None:
    async with open_postgres_store(pg_dsn) as store:
        await store.append("a", make(4), expected_seq=0, blobs=[b"blob"])
        assert (await verify(store)).ok
        sql(pg_dsn, tamper)
        report = await verify(store)
    assert report.fault is not None
    assert (report.fault.kind, report.fault.seq) == (kind, seq), str(report.fault)


async def test_verify_reads_many_streams_in_one_cursor_split_across_batches(
    pg_dsn: str, make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of 3 rows cut through streams; a fault in the middle stream is still
    # found at its seq, and the streams after it are still checked.
    monkeypatch.setattr(eventlog._postgres, "READ_BATCH", 3)
    async with open_postgres_store(pg_dsn) as store:
        for stream in ("a", "b", "c"):
            await store.append(stream, make(4), expected_seq=0)
        report = await verify(store)
        assert (report.ok, report.streams, report.events) == (True, 3, 12)
        sql(pg_dsn, "UPDATE events SET body = '\\x7b7d' WHERE stream = 'b' AND seq = 1")
        report = await verify(store)
        assert report.fault is not None
        assert (report.fault.kind, report.fault.stream, report.fault.seq) == ("modified", "b", 1)
        sql(pg_dsn, "UPDATE events SET body = '\\x7b7d' WHERE stream = 'c' AND seq = 3")
        faults = [(f.stream, f.seq) for f in (await verify(store)).faults]
        assert ("c", 3) in faults, faults


async def test_a_read_left_while_the_next_batch_is_fetched_returns_its_reader(
    pg_dsn: str, make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eventlog._postgres, "READ_BATCH", 2)
    async with open_postgres_store(pg_dsn) as store:
        await store.append("s", make(9), expected_seq=0)
        async with closing(store.read("s")) as events:
            async for event in events:  # the second batch is being fetched: left here
                assert event.seq == 0
                break
        assert [e.seq async for e in store.read("s")] == list(range(9))
        assert [e.seq async for e in store.read("s", from_seq=4)] == list(range(4, 9))
        assert len(store._idle) == 1  # one reader, back in the pool each time


async def test_after_a_lost_connection_the_writer_proves_what_committed(pg_dsn: str) -> None:
    from eventlog._writer import AppendRequest

    async with open_postgres_store(pg_dsn) as store:
        events = await store.append("s", one(0), expected_seq=0)
        writer = store._writer
        assert writer is not None
        committed = AppendRequest(stream="s", events=one(0), result=events)
        assert writer._committed([committed])
        # Same seq, another hash: what a competing writer committed, not ours.
        other = msgspec.structs.replace(events[0], hash="f" * 64)
        assert not writer._committed([AppendRequest(stream="s", events=one(0), result=(other,))])
        assert not writer._committed([AppendRequest(blobs=(b"x",))])


async def test_side_channel_notifications_are_delivered_and_stored_nowhere(pg_dsn: str) -> None:
    """notifier/notifications: what is sent while someone listens arrives, in order, in
    another store (another process's, say); the log holds none of it; a channel name
    that is not an identifier is refused before any SQL."""
    async with open_postgres_store(pg_dsn) as sender, open_postgres_store(pg_dsn) as listener:
        async with listener.notifications("skillog_test") as receive:
            async with sender.notifier("skillog_test") as send:
                await send(["one", "two"])
                await send(['{"x": "three"}'])
            got: list[str] = []
            with trio.fail_after(10):
                while len(got) < 3:
                    more = await receive()
                    assert more is not None
                    got += more
        assert got == ["one", "two", '{"x": "three"}']
        assert [e async for e in sender.read_all()] == []
        with pytest.raises(StoreError, match="not a notification channel"):
            async with sender.notifier("x; DROP TABLE events"):
                pass
