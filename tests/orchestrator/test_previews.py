"""Previews are bounded and lossy by design (orchestrator/_previews.py): a full follower
drops instead of waiting, the side file keeps its last batches only, a NOTIFY payload
stays under PostgreSQL's limit; the tap names the session and the turn."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
import trio

from eventlog import MemoryStore
from orchestrator import Agent, Preview, PreviewBoard, PreviewTap
from orchestrator._previews import (
    MAX_PAYLOAD,
    SIDE_ROWS,
    SideFileReader,
    SideFileWriter,
    _Batch,
    payloads,
    side_file,
)
from orchestrator.adapters import ScriptedModel


def preview(n: int, *, session: str = "s", turn: int = 1, text: str = "x") -> Preview:
    return Preview(session=session, turn=turn, n=n, kind="text", index=0, text=text)


async def test_a_full_follower_drops_and_a_late_one_gets_the_answer_so_far() -> None:
    board = PreviewBoard(per_follower=4)
    with board.following("s") as slow:
        for n in range(1, 11):
            board.publish(preview(n))  # never blocks
        assert [slow.receive_nowait().n for _ in range(4)] == [1, 2, 3, 4]
        assert board.dropped == 6
    board.publish(preview(1, session="t"))
    with board.following("s") as late:  # turn 1's first previews, kept for joiners
        assert [late.receive_nowait().n for _ in range(4)] == [1, 2, 3, 4]
    board.publish(preview(11, turn=2))  # a new answer replaces the kept one
    with board.following("s") as later:
        assert later.receive_nowait().turn == 2
    assert not board.followed()


async def test_the_tap_names_the_session_and_the_turn() -> None:
    got: list[Preview] = []
    tap = PreviewTap("s1", got.append)
    turns = [
        {"text": "a" * 40, "tool_calls": [{"name": "no.such.tool"}]},  # an error result
        {"text": "b" * 20},
    ]
    agent = Agent(
        model=ScriptedModel(turns), model_name="m", observers=[tap.event], on_delta=tap.delta
    )
    await agent.run(MemoryStore(), "hi", session_id="s1")
    texts = [(p.turn, p.text) for p in got if p.kind == "text"]
    assert texts == [(1, "a" * 16), (1, "a" * 16), (1, "a" * 8), (2, "b" * 16), (2, "b" * 4)]
    assert [p.n for p in got] == list(range(1, len(got) + 1))
    assert {p.session for p in got} == {"s1"}
    (call,) = [p for p in got if p.name]
    assert (call.turn, call.kind, call.name) == (1, "tool_call", "no.such.tool")


async def test_the_side_file_keeps_its_last_batches_and_a_reader_reads_on(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    writer, board = SideFileWriter(db), PreviewBoard()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        with board.following("s") as seen:
            await nursery.start(SideFileReader(db, board).run)
            await trio.sleep(0.25)  # the reader has set where it starts
            for n in range(1, 6):
                writer.publish(preview(n))
            with trio.fail_after(10):
                got = [(await seen.receive()).n for _ in range(5)]
        nursery.cancel_scope.cancel()
    assert got == [1, 2, 3, 4, 5]
    assert side_file(db).stat().st_mode & 0o777 == 0o600
    # Bounded: write past SIDE_ROWS batches, the oldest go.
    from orchestrator._previews import _connect, _write

    conn = _connect(side_file(db))
    for n in range(SIDE_ROWS + 10):
        _write(conn, _Batch("w", [preview(n)]))
    (rows,) = conn.execute("SELECT count(*) FROM previews").fetchone()
    conn.close()
    assert rows == SIDE_ROWS


def test_notify_payloads_stay_under_the_limit() -> None:
    batch = [preview(n, text="é" * 300) for n in range(100)]
    huge = preview(101, text="x" * MAX_PAYLOAD)
    sent, dropped = payloads([*batch, huge], "w1")
    assert dropped == 1
    assert all(len(p.encode()) < MAX_PAYLOAD for p in sent) and len(sent) > 1
    back = [msgspec.json.decode(p, type=_Batch) for p in sent]
    assert {b.origin for b in back} == {"w1"}
    assert [q for b in back for q in b.previews] == batch
    # The largest preview that fits alone, in a payload of its own under the limit.
    for size in range(MAX_PAYLOAD - 200, MAX_PAYLOAD):
        sent, dropped = payloads([preview(1, text="y" * size)], "w1")
        assert all(len(p.encode()) < MAX_PAYLOAD for p in sent)
        assert len(sent) + dropped == 1


def test_a_side_file_that_is_not_ours_is_skipped(tmp_path: Path) -> None:
    from orchestrator._previews import _read

    conn = sqlite3.connect(tmp_path / "x")
    conn.execute("CREATE TABLE previews (id INTEGER PRIMARY KEY, batch BLOB NOT NULL)")
    conn.execute("INSERT INTO previews (batch) VALUES (?)", (b"not json",))
    conn.execute("INSERT INTO previews (batch) VALUES (?)", (msgspec.json.encode([preview(1)]),))
    ours = _Batch("w", [preview(1)])
    conn.execute("INSERT INTO previews (batch) VALUES (?)", (msgspec.json.encode(ours),))
    last, batches = _read(conn, 0)  # a batch of an older skillog (no origin) is skipped too
    assert last == 3 and batches == [ours]


async def test_a_reader_skips_its_own_process_writer(tmp_path: Path) -> None:
    """A process that publishes to its board and to the side file reads back only the
    other processes' previews, whenever they come (the serve-level race this closes:
    tests/service/test_previews.py)."""
    db = tmp_path / "x.db"
    mine, theirs, board = SideFileWriter(db), SideFileWriter(db), PreviewBoard()
    async with trio.open_nursery() as nursery:
        await nursery.start(mine.run)
        await nursery.start(theirs.run)
        with board.following("s") as seen:
            await nursery.start(SideFileReader(db, board, skip=mine.origin).run)
            await trio.sleep(0.25)  # the reader has set where it starts
            mine.publish(preview(1, text="mine"))
            await trio.sleep(0.1)
            theirs.publish(preview(1, text="theirs"))
            with trio.fail_after(10):
                got = await seen.receive()
            await trio.sleep(0.3)  # two more polls: nothing else comes
            with pytest.raises(trio.WouldBlock):
                seen.receive_nowait()
        nursery.cancel_scope.cancel()
    assert got.text == "theirs"
