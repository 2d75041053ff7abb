"""Tampering with the SQLite file directly, and what verify (with checkpoints) reports."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from eventlog import (
    GENESIS_HASH,
    Checkpoint,
    Fault,
    MemoryStore,
    NewEvent,
    blob_digest,
    event_hash,
    make_checkpoint,
    open_sqlite_store,
    verify,
)
from eventlog._checkpoint import public_hex


def events(n: int, start: int = 0) -> list[NewEvent]:
    return [
        NewEvent(type="t.x", body=b'{"i":%d}' % i, recorded_at=10 + i)
        for i in range(start, start + n)
    ]


BLOBS = (b"a skill file", b"", b"\x00\xffbinary")


async def build(path: Path, key: Ed25519PrivateKey | None = None) -> Checkpoint | None:
    async with open_sqlite_store(path) as store:
        await store.append("a", events(6), expected_seq=0, blobs=BLOBS)
        await store.append("b", events(4), expected_seq=0)
        if key is None:
            return None
        return await make_checkpoint(store, key, previous=None, clock=lambda: 1)


async def check(path: Path, checkpoint: Checkpoint | None = None, key: str | None = None):  # type: ignore[no-untyped-def]
    async with open_sqlite_store(path, readonly=True) as store:
        return await verify(
            store,
            checkpoints=[checkpoint] if checkpoint else None,
            keys={key} if key else (),
            tofu=key is None,
        )


def sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for s in statements:
            conn.execute(s)
    conn.close()


async def test_an_untouched_log_verifies(tmp_path: Path) -> None:
    await build(tmp_path / "x.db")
    report = await check(tmp_path / "x.db")
    assert report.ok and (report.streams, report.events, report.blobs) == (2, 10, 3)


@pytest.mark.parametrize(
    ("tamper", "kind"),
    [
        # one byte of a blob changed in place
        (
            "UPDATE blobs SET data = CAST('a skill fil3' AS BLOB) WHERE length(data) = 12",
            "blob_modified",
        ),
        # the empty blob given content
        (f"UPDATE blobs SET data = x'00' WHERE digest = '{blob_digest(b'')}'", "blob_modified"),
        # stored as TEXT, not a BLOB (same bytes)
        ("UPDATE blobs SET data = 'a skill file' WHERE length(data) = 12", "blob_malformed"),
        # a digest that is not one
        ("UPDATE blobs SET digest = 'not-a-digest' WHERE length(data) = 0", "blob_malformed"),
        ("UPDATE blobs SET digest = 7 WHERE length(data) = 0", "blob_malformed"),
        # a blob filed under another blob's digest (swapped contents)
        (
            "UPDATE blobs SET data = CASE length(data) WHEN 12 THEN x'00ff62696e617279' "
            "ELSE CAST('a skill file' AS BLOB) END WHERE length(data) > 0",
            "blob_modified",
        ),
    ],
)
async def test_a_changed_blob_is_found(tmp_path: Path, tamper: str, kind: str) -> None:
    db = tmp_path / "x.db"
    await build(db)
    sql(db, tamper)
    report = await check(db)
    assert report.fault is not None and report.fault.kind == kind, report.fault
    assert report.fault.blob is not None and str(report.fault).startswith("blob ")
    assert report.events == 10  # the chains were checked first and are intact


async def test_a_changed_blob_in_a_memory_store_is_found() -> None:
    store = MemoryStore()
    digest = await store.put_blob(b"x")
    store._blobs[digest] = b"y"  # what a bug or a tampered import would leave
    report = await verify(store)
    assert report.fault is not None and report.fault.kind == "blob_modified"
    assert report.fault.blob == digest


@pytest.mark.parametrize(
    ("tamper", "kind", "seq"),
    [
        (
            ["UPDATE events SET body = CAST('{\"i\":99}' AS BLOB) WHERE stream='a' AND seq=3"],
            "modified",
            3,
        ),
        (["UPDATE events SET type = 't.y' WHERE stream='a' AND seq=0"], "modified", 0),
        (["UPDATE events SET recorded_at = 5 WHERE stream='a' AND seq=5"], "modified", 5),
        (["UPDATE events SET hash = '" + "e" * 64 + "' WHERE stream='a' AND seq=2"], "modified", 2),
        (["DELETE FROM events WHERE stream='a' AND seq=2"], "missing", 2),
        (["DELETE FROM events WHERE stream='a' AND seq=0"], "missing", 0),
        # swap two events' places
        (
            [
                "UPDATE events SET seq = -1 WHERE stream='a' AND seq=1",
                "UPDATE events SET seq = 1 WHERE stream='a' AND seq=2",
                "UPDATE events SET seq = 2 WHERE stream='a' AND seq=-1",
            ],
            "moved",
            1,
        ),
        # delete one and renumber the rest down
        (
            [
                "DELETE FROM events WHERE stream='a' AND seq=2",
                "UPDATE events SET seq = seq - 1 WHERE stream='a' AND seq > 2",
            ],
            "moved",
            2,
        ),
        (["UPDATE events SET body = 'text not blob' WHERE stream='b' AND seq=1"], "malformed", 1),
        (["UPDATE events SET seq = 'x' WHERE stream='b' AND seq=1"], "missing", 1),
    ],
)
async def test_every_in_chain_tampering_is_found_at_the_first_bad_seq(
    tmp_path: Path, tamper: list[str], kind: str, seq: int
) -> None:
    db = tmp_path / "x.db"
    await build(db)
    sql(db, *tamper)
    report = await check(db)
    assert report.fault is not None, tamper
    assert (report.fault.kind, report.fault.seq) == (kind, seq), str(report.fault)
    assert report.fault.stream in ("a", "b")


async def test_an_inserted_well_hashed_event_breaks_the_next_link(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    await build(db)
    conn = sqlite3.connect(db)
    prev = conn.execute("SELECT hash FROM events WHERE stream='a' AND seq=2").fetchone()[0]
    with conn:
        conn.execute("UPDATE events SET seq = seq + 1000 WHERE stream='a' AND seq >= 3")
        conn.execute("UPDATE events SET seq = seq - 999 WHERE stream='a' AND seq >= 1003")
        h = event_hash(prev, "t.x", "a", 3, 7, b"{}")
        conn.execute(
            "INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, hash) "
            "VALUES ('a', 3, 999, 't.x', 7, x'7b7d', ?, ?)",
            (prev, h),
        )
    conn.close()
    report = await check(db)
    assert report.fault is not None
    assert (report.fault.kind, report.fault.seq) == ("moved", 4)


async def test_consistent_rewrite_truncation_and_deletion_need_a_checkpoint(
    tmp_path: Path,
) -> None:
    key = Ed25519PrivateKey.generate()
    pub = public_hex(key.public_key())
    for tamper, kind, seq in [
        (["DELETE FROM events WHERE stream='a' AND seq >= 4"], "truncated", 4),
        (["DELETE FROM events WHERE stream='b'"], "stream_missing", None),
    ]:
        db = tmp_path / f"{kind}.db"
        cp = await build(db, key)
        sql(db, *tamper)
        assert (await check(db)).ok  # invisible from inside the chains
        report = await check(db, cp, pub)
        assert report.fault is not None
        assert (report.fault.kind, report.fault.seq) == (kind, seq)

    # A consistent rewrite: recompute every hash of stream 'a' after changing a body.
    db = tmp_path / "rewrite.db"
    cp = await build(db, key)
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT seq, type, recorded_at, body FROM events WHERE stream='a' ORDER BY seq"
    ).fetchall()
    prev = GENESIS_HASH
    with conn:
        for seq, type_, at, body in rows:
            body = b'{"i":"forged"}' if seq == 1 else body
            h = event_hash(prev, type_, "a", seq, at, body)
            conn.execute(
                "UPDATE events SET body=?, prev_hash=?, hash=? WHERE stream='a' AND seq=?",
                (body, prev, h, seq),
            )
            prev = h
    conn.close()
    assert (await check(db)).ok
    report = await check(db, cp, pub)
    assert report.fault is not None
    assert (report.fault.kind, report.fault.stream, report.fault.seq) == ("rewritten", "a", 5)


async def test_a_forged_or_foreign_checkpoint_is_reported(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    db = tmp_path / "x.db"
    cp = await build(db, key)
    assert cp is not None
    forged = Checkpoint(
        version=cp.version, created_at=2, prev=cp.prev, key=cp.key, heads=cp.heads, sig=cp.sig
    )
    report = await check(db, forged)
    assert report.fault is not None and report.fault.kind == "checkpoint"
    other = public_hex(Ed25519PrivateKey.generate().public_key())
    report = await check(db, cp, other)
    assert report.fault is not None and "not among the 1 trusted key(s)" in report.fault.detail
    assert (await check(db, cp, cp.key)).ok


async def test_a_checkpoint_signed_by_an_untrusted_key_fails_unless_tofu(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    cp = await build(db, Ed25519PrivateKey.generate())
    assert cp is not None
    async with open_sqlite_store(db, readonly=True) as store:
        report = await verify(store, checkpoints=[cp])
        assert report.fault is not None and report.fault.kind == "checkpoint"
        assert report.tofu_key is None
        report = await verify(store, checkpoints=[cp], tofu=True)
        assert report.ok and report.tofu_key == cp.key


class _Seen:
    """A toy grammar: records the seqs it is fed; seq ``bad`` breaks rule ``odd``."""

    def __init__(self, bad: int | None) -> None:
        self.bad, self.seqs = bad, []  # type: list[int]

    def feed(self, rows):  # type: ignore[no-untyped-def]
        for row in rows:
            self.seqs.append(row[0])
            if row[0] == self.bad:
                return Fault(kind="-", stream=None, seq=row[0], detail="odd one", rule="odd")
        return None


@pytest.mark.parametrize("sqlite", [True, False])
async def test_a_grammar_hook_sees_exactly_the_rows_the_chain_accepted(
    tmp_path: Path, sqlite: bool
) -> None:
    """The hook through which a writing program checks its own event sequences: fed
    every row of a stream in seq order, up to a chain fault and no further; its first
    violation is a ``grammar`` fault naming the rule, and the chain is still checked to
    its end. A stream the factory returns None for is not checked."""
    path = tmp_path / "g.db"
    await build(path)
    with sqlite3.connect(path) as db:  # stream b: seq 2 edited in place
        db.execute("UPDATE events SET body = X'00' WHERE stream = 'b' AND seq = 2")
    fed: dict[str, _Seen] = {}

    def grammar(stream: str) -> _Seen | None:
        if stream == "c":
            return None
        fed[stream] = _Seen(bad=3 if stream == "a" else None)
        return fed[stream]

    if sqlite:
        async with open_sqlite_store(path, readonly=True) as store:
            report = await verify(store, grammar=grammar)
    else:
        store = MemoryStore()
        async with open_sqlite_store(path, readonly=True) as src:
            for stream in ("a", "b"):
                rows = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
                        async for e in src.read(stream)]  # fmt: skip
                await store.append(stream, rows, expected_seq=0)
        await store.append("c", events(2), expected_seq=0)
        report = await verify(store, grammar=grammar)
    assert fed["a"].seqs == [0, 1, 2, 3]  # fed no more after its violation...
    assert report.events == (6 + 2 if sqlite else 6 + 4 + 2)  # ...but every chain checked
    found = [(f.kind, f.stream, f.seq, f.rule) for f in report.faults]
    if sqlite:
        assert fed["b"].seqs == [0, 1]  # nothing past the chain fault
        assert found == [("grammar", "a", 3, "odd"), ("modified", "b", 2, None)]
    else:
        assert found == [("grammar", "a", 3, "odd")]
    assert str(report.faults[0]) == "stream 'a' seq 3: grammar odd: odd one"


def _names_blobs(type_: str):  # type: ignore[no-untyped-def]
    """A ``references`` hook: an ``r.blob`` event's body is the digest it names."""
    return (lambda body: [body.decode()]) if type_ == "r.blob" else None


async def test_a_deleted_referenced_blob_is_found_and_an_unreferenced_one_is_not(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    named, unnamed = b"named by an event", b"named by none"
    async with open_sqlite_store(db) as store:
        await store.append("a", events(2), expected_seq=0)
        ref = NewEvent(type="r.blob", body=blob_digest(named).encode(), recorded_at=1)
        await store.append("a", [ref], expected_seq=2, blobs=[named, unnamed])
    sql(db, f"DELETE FROM blobs WHERE digest = '{blob_digest(unnamed)}'")
    async with open_sqlite_store(db, readonly=True) as store:
        for streams in (None, ["a"]):
            report = await verify(store, streams=streams, references=_names_blobs)
            assert report.ok, report.faults
    sql(db, f"DELETE FROM blobs WHERE digest = '{blob_digest(named)}'")
    async with open_sqlite_store(db, readonly=True) as store:
        assert (await verify(store)).ok  # without the hook, nothing says the blob is needed
        for streams in (None, ["a"]):
            report = await verify(store, streams=streams, references=_names_blobs)
            assert [(f.kind, f.stream, f.seq, f.blob) for f in report.faults] == [
                ("blob_missing", "a", 2, blob_digest(named))
            ]


async def test_one_streams_scope_sees_its_own_strays_and_blobs_only(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await build(db)
    sql(
        db,
        "INSERT INTO events (stream, seq, type, recorded_at, body, prev_hash, hash) "
        "SELECT stream, -1, type, recorded_at, body, prev_hash, hash FROM events "
        "WHERE stream = 'b' AND seq = 0",
        f"UPDATE blobs SET data = x'00' WHERE digest = '{blob_digest(BLOBS[0])}'",
    )
    async with open_sqlite_store(db, readonly=True) as store:
        whole = await verify(store)
        only_b = await verify(store, streams=["b"])
        only_a = await verify(store, streams=["a"])
        absent = await verify(store, streams=["nope"])
    assert {f.kind for f in whole.faults} == {"stray", "blob_modified"}
    assert [(f.kind, f.stream, f.seq) for f in only_b.faults] == [("stray", "b", -1)]
    assert only_b.streams == 1 and only_b.events == 4
    # No hook names a blob, so stream a's scope has no blob to check: only the whole
    # log rehashes every stored blob.
    assert only_a.ok and only_a.events == 6
    assert absent.ok and absent.streams == 0 and absent.events == 0
