"""Previews are bounded and lossy by design (orchestrator/_previews.py): a full follower
drops instead of waiting, the side file keeps its last batches only, a NOTIFY payload
stays under PostgreSQL's limit; the tap names the session and the turn."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import trio

from eventlog import MemoryStore
from orchestrator import Agent, Preview, PreviewBoard, PreviewTap
from orchestrator._previews import (
    MAX_PAYLOAD,
    SIDE_ROWS,
    SideFileReader,
    SideFileWriter,
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
        _write(conn, [preview(n)])
    (rows,) = conn.execute("SELECT count(*) FROM previews").fetchone()
    conn.close()
    assert rows == SIDE_ROWS


def test_notify_payloads_stay_under_the_limit() -> None:
    batch = [preview(n, text="é" * 300) for n in range(100)]
    huge = preview(101, text="x" * MAX_PAYLOAD)
    sent, dropped = payloads([*batch, huge])
    assert dropped == 1
    assert all(len(p.encode()) < MAX_PAYLOAD for p in sent) and len(sent) > 1
    back = [q for p in sent for q in msgspec.json.decode(p, type=list[Preview])]
    assert back == batch


def test_a_side_file_that_is_not_ours_is_skipped(tmp_path: Path) -> None:
    from orchestrator._previews import _read

    conn = sqlite3.connect(tmp_path / "x")
    conn.execute("CREATE TABLE previews (id INTEGER PRIMARY KEY, batch BLOB NOT NULL)")
    conn.execute("INSERT INTO previews (batch) VALUES (?)", (b"not json",))
    conn.execute("INSERT INTO previews (batch) VALUES (?)", (msgspec.json.encode([preview(1)]),))
    last, batches = _read(conn, 0)
    assert last == 2 and batches == [[preview(1)]]
