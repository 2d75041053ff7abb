"""The EventStore contract, run against every store implementation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from eventlog import (
    GENESIS_HASH,
    BlobNotFoundError,
    ConcurrencyError,
    EventStore,
    Head,
    InvalidEventError,
    NewEvent,
    blob_digest,
    closing,
    event_hash,
    verify,
)

Make = Callable[..., list[NewEvent]]
Forge = Callable[..., int]
ONE = [NewEvent(type="t", body=b"{}", recorded_at=0)]


async def test_append_assigns_seq_position_and_chains_hashes(store: EventStore, make: Make) -> None:
    first = await store.append("s", make(2), expected_seq=0)
    second = await store.append("s", make(1, start=2), expected_seq=2)
    events = [*first, *second]
    assert [e.seq for e in events] == [0, 1, 2]
    assert [e.prev_hash for e in events] == [GENESIS_HASH, events[0].hash, events[1].hash]
    positions = [e.position for e in events]
    assert positions == sorted(positions) and positions[0] >= 1
    for e in events:
        assert e.hash == event_hash(e.prev_hash, e.type, e.stream, e.seq, e.recorded_at, e.body)
    assert [e async for e in store.read("s")] == events
    assert await store.head("s") == Head(seq=2, hash=events[-1].hash)
    assert await store.head("other") is None


async def test_stale_expected_seq_raises_and_writes_nothing(store: EventStore, make: Make) -> None:
    await store.append("s", make(2), expected_seq=0)
    for bad in (0, 1, 3):
        with pytest.raises(ConcurrencyError) as info:
            await store.append("s", make(1), expected_seq=bad)
        assert info.value.actual_seq == 2 and info.value.expected_seq == bad
    assert len([e async for e in store.read("s")]) == 2


async def test_on_durable_runs_once_the_commit_is_durable_and_never_for_a_failed_one(
    store: EventStore, make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []
    stored = await store.append(
        "s", make(2), expected_seq=0, on_durable=lambda: seen.append(len(seen))
    )
    assert seen == [0] and len(stored) == 2
    # Refused (a stale seq): nothing committed, nothing run.
    with pytest.raises(ConcurrencyError):
        await store.append("s", make(1), expected_seq=0, on_durable=lambda: seen.append(-1))
    assert seen == [0]

    # What goes wrong in it is the appender's: the append is committed and says so.
    def broken() -> None:
        raise RuntimeError("the callback's own fault")

    committed = await store.append("s", make(1, start=2), expected_seq=2, on_durable=broken)
    assert [e.seq for e in committed] == [2]
    assert "on_durable" in caplog.text and "the callback's own fault" in caplog.text
    assert [e.seq async for e in store.read("s")] == [0, 1, 2]


async def test_an_append_is_never_cancelled_its_caller_is_at_its_next_checkpoint(
    store: EventStore, make: Make
) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        stored = await store.append("s", make(2), expected_seq=0)
        assert [e.seq for e in stored] == [0, 1]
        await trio.lowlevel.checkpoint()
        raise AssertionError("the cancellation acts at the next checkpoint")  # pragma: no cover
    assert scope.cancelled_caught
    assert [e.seq async for e in store.read("s")] == [0, 1]


async def test_concurrent_appends_at_the_same_seq_never_fork(store: EventStore, make: Make) -> None:
    outcomes: list[str] = []

    async def racer(i: int) -> None:
        try:
            await store.append("race", make(1, start=i), expected_seq=0)
            outcomes.append("ok")
        except ConcurrencyError:
            outcomes.append("conflict")

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(racer, i)
    assert sorted(outcomes) == ["conflict"] * 19 + ["ok"]
    assert len([e async for e in store.read("race")]) == 1


async def test_many_concurrent_streams_all_commit_in_order(store: EventStore, make: Make) -> None:
    async def writer(i: int) -> None:
        for seq in range(5):
            await store.append(f"s{i:02}", make(1, start=seq), expected_seq=seq)

    async with trio.open_nursery() as nursery:
        for i in range(16):
            nursery.start_soon(writer, i)
    infos = await store.streams()
    assert [s.stream for s in infos] == [f"s{i:02}" for i in range(16)]
    assert {s.length for s in infos} == {5}
    everything = [e async for e in store.read_all()]
    assert len(everything) == 80
    assert [e.position for e in everything] == sorted({e.position for e in everything})
    assert (await verify(store)).ok


async def test_read_ranges_and_read_all_from_position(store: EventStore, make: Make) -> None:
    a = await store.append("a", make(5), expected_seq=0)
    b = await store.append("b", make(2), expected_seq=0)
    assert [e.seq async for e in store.read("a", from_seq=2)] == [2, 3, 4]
    assert [e.seq async for e in store.read("a", from_seq=1, to_seq=3)] == [1, 2]
    assert [e async for e in store.read("a", from_seq=9)] == []
    assert [e async for e in store.read("nope")] == []
    tail = [e async for e in store.read_all(from_position=a[-1].position)]
    assert tail == [a[-1], *b]


async def test_streams_summarises_each_stream(store: EventStore, make: Make) -> None:
    assert await store.streams() == []
    evs = await store.append("z", make(3), expected_seq=0)
    (info,) = await store.streams()
    assert (info.stream, info.length, info.head_hash) == ("z", 3, evs[-1].hash)
    assert (info.first_recorded_at, info.last_recorded_at) == (1000, 1002)


async def test_blobs_are_content_addressed_and_stored_once(store: EventStore, make: Make) -> None:
    digest = await store.put_blob(b"hello")
    assert digest == blob_digest(b"hello") == await store.put_blob(b"hello")
    assert await store.get_blob(digest) == b"hello"
    assert await store.has_blob(digest)
    await store.append("s", make(1), expected_seq=0, blobs=[b"with-event", b""])
    assert await store.get_blob(blob_digest(b"with-event")) == b"with-event"
    assert await store.get_blob(blob_digest(b"")) == b""
    missing = "f" * 64
    assert not await store.has_blob(missing)
    with pytest.raises(BlobNotFoundError, match=missing):
        await store.get_blob(missing)
    stored = [b async for b in store.read_blobs()]
    assert sorted(stored) == sorted((blob_digest(b), b) for b in (b"hello", b"with-event", b""))


async def test_a_failed_append_commits_none_of_its_blobs(store: EventStore, make: Make) -> None:
    await store.append("s", make(1), expected_seq=0)
    with pytest.raises(ConcurrencyError):
        await store.append("s", make(1), expected_seq=0, blobs=[b"orphan"])
    assert not await store.has_blob(blob_digest(b"orphan"))


@pytest.mark.parametrize(
    ("stream", "events", "expected_seq", "match"),
    [
        ("", ONE, 0, "stream id"),
        ("a\nb", ONE, 0, "control character"),
        ("x" * 300, ONE, 0, "1..256"),
        ("s", [], 0, "at least one event"),
        ("s", ONE, -1, "expected_seq"),
        ("s", [NewEvent(type="t\tx", body=b"{}", recorded_at=0)], 0, "control character"),
        ("s", [NewEvent(type="t", body="str", recorded_at=0)], 0, "bytes"),  # type: ignore[arg-type]
        ("s", [NewEvent(type="t", body=b"{}", recorded_at=-5)], 0, "recorded_at"),
        ("s", [NewEvent(type="t", body=b"{}", recorded_at=2**64)], 0, "recorded_at"),
        ("s", ["not an event"], 0, "NewEvent"),
        ("s\ud800", ONE, 0, "Unicode"),
        # The second event bad after a good first one of the same type (the fast path
        # checks each type tag once per append).
        ("s", [*ONE, NewEvent(type="t", body=b"{}", recorded_at=-1)], 0, r"events\[1\]"),
        ("s", [*ONE, NewEvent(type="t\n", body=b"{}", recorded_at=0)], 0, r"events\[1\]"),
        ("s", [NewEvent(type=["t"], body=b"{}", recorded_at=0)], 0, "string"),  # type: ignore[arg-type]
        ("s", [NewEvent(type="t", body=b"{}", recorded_at=True)], 0, "recorded_at"),
        ("s", ONE, True, "expected_seq"),
        ("s", (e for e in ONE), 0, "sequence"),
    ],
)
async def test_bad_append_arguments_are_rejected_clearly(
    store: EventStore, stream: str, events: list[NewEvent], expected_seq: int, match: str
) -> None:
    with pytest.raises(InvalidEventError, match=match):
        await store.append(stream, events, expected_seq=expected_seq)
    assert await store.streams() == []


async def test_follow_yields_history_then_new_commits(store: EventStore, make: Make) -> None:
    await store.append("s", make(2), expected_seq=0)
    seen: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def consume() -> None:
                async for e in store.follow():
                    seen.append(e.seq)
                    if len(seen) == 5:
                        nursery.cancel_scope.cancel()

            nursery.start_soon(consume)
            await trio.sleep(0.01)
            for seq in range(2, 5):
                await store.append("s", make(1, start=seq), expected_seq=seq)
    assert seen == [0, 1, 2, 3, 4]


# -- what verify checks is exactly what every reader shows ------------------------------

# Rows no chain can hold: a negative seq, stream ids that are not stream ids.
STRAYS = [("s", -1), ("s\n", 0), ("", 0), ("x" * 257, 0), ("tab\there", 3)]


async def snapshot(store: EventStore) -> tuple[object, ...]:
    """Everything the readers show (follow: up to the last event read_all shows)."""
    everything = [e async for e in store.read_all()]
    followed = []
    if everything:
        with trio.fail_after(10):
            async with closing(store.follow()) as events:
                async for e in events:
                    followed.append(e)
                    if e.position == everything[-1].position:
                        break
    return (
        await store.streams(),
        [e async for e in store.read("s")],
        await store.head("s"),
        everything,
        followed,
    )


async def test_rows_outside_every_chain_are_shown_by_no_reader_and_reported_by_verify(
    store: EventStore, make: Make, forge: Forge
) -> None:
    await store.append("s", make(3), expected_seq=0)
    before = await snapshot(store)
    assert (await verify(store)).ok
    positions = [forge(store, stream, seq) for stream, seq in STRAYS]
    assert await snapshot(store) == before
    for stream in {stream for stream, _ in STRAYS} - {"s"}:
        assert [e async for e in store.read(stream)] == []
        assert await store.head(stream) is None
    report = await verify(store)
    assert not report.ok and report.events == 3
    assert [(f.kind, f.position, f.seq) for f in report.faults] == [
        ("stray", p, seq) for p, (_, seq) in zip(positions, STRAYS, strict=True)
    ]
    assert "seq -1 is not an integer >= 0" in str(report.faults[0])
    assert f"position {positions[0]}" in str(report.faults[0])
    assert "is not a stream id" in report.faults[1].detail


async def test_a_stray_never_becomes_a_head_appends_chain_from_genesis(
    store: EventStore, make: Make, forge: Forge
) -> None:
    forge(store, "ghost", -1, hash="f" * 64)
    assert await store.head("ghost") is None and await store.streams() == []
    (first,) = await store.append("ghost", make(1), expected_seq=0)
    assert first.seq == 0 and first.prev_hash == GENESIS_HASH
    report = await verify(store)
    assert report.events == 1 and [f.kind for f in report.faults] == ["stray"]


async def test_a_row_after_a_gap_is_shown_and_verify_reports_the_gap(
    store: EventStore, make: Make, forge: Forge
) -> None:
    await store.append("s", make(3), expected_seq=0)
    forge(store, "s", 7)
    shown = [e.seq async for e in store.read("s")]
    assert shown == [0, 1, 2, 7]
    assert [e.seq async for e in store.read_all()] == shown
    report = await verify(store)
    assert report.fault is not None
    assert (report.fault.kind, report.fault.stream, report.fault.seq) == ("missing", "s", 3)
    assert len(report.faults) == 1  # the row at seq 7 is in the chain verify walked


async def test_verify_reports_every_broken_stream_not_only_the_first(
    store: EventStore, make: Make, forge: Forge
) -> None:
    for name in ("a", "b", "c"):
        await store.append(name, make(2), expected_seq=0)
    forge(store, "a", 5)
    forge(store, "c", 2)  # a well-placed seq with a wrong hash
    report = await verify(store)
    assert [(f.stream, f.kind) for f in report.faults] == [("a", "missing"), ("c", "moved")]
