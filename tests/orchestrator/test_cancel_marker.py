"""A cancel's ``session.ended`` says how many events before it the cancel wrote
(``closes``): verify checks it (rule ``cancel_marker``) and re-drive starts the cancel
there, never from stamps. Each kind of cancel re-drives from the marker (the fallback
for older sessions is made to fail); a forged marker is a finding; a cancelled end
without one is a finding where the session's rules record it, and re-drive refuses it.
Old-format logs: tests/replay/test_golden.py (``v0.3/cancelled.jsonl``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

import replay._redrive
from eventlog import EventStore, MemoryStore, NewEvent, import_jsonl, open_sqlite_store
from orchestrator import Agent, PolicyConfig, verdict
from orchestrator._cancel import record_cancel
from orchestrator._events import (
    ModelInterrupted,
    SessionEnded,
    ToolCompleted,
    ToolInterrupted,
)
from orchestrator._grammar import session_grammar
from orchestrator.adapters import ScriptedModel
from replay import BrokenLogError, load_recording, redrive

from .conftest import Kit, SkillMaker, call, turn
from .test_cancel import held_after_the_answer

GOLDEN = Path(__file__).parents[1] / "golden"
Edit = Callable[[int, str, dict[str, Any], int], tuple[dict[str, Any], int]]


@pytest.fixture
def marker_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-drive may not fall back on stamps: the sessions here record ``closes``."""

    def refuse(recording: object) -> int | None:
        raise AssertionError("re-drive looked for the cancel by its stamps")

    monkeypatch.setattr(replay._redrive, "_cancel_start_unmarked", refuse)


async def cut_then_cancel(store: EventStore, agent: Agent, ready: trio.Event) -> SessionEnded:
    """Drive ``agent`` until ``ready``, cut the driver there (as a worker's stop does),
    then record the cancel as the lease holder would."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(agent.run, store, "go", session_id="s"))
        with trio.fail_after(60):
            await ready.wait()
        nursery.cancel_scope.cancel()
    return await record_cancel(store, "s", by="sam", reason="stop")


def on_recorded(agent: Agent, type_: str) -> trio.Event:
    """Set once ``agent`` records an event of ``type_``."""
    seen = trio.Event()
    agent.observers = [lambda e: seen.set() if e.type == type_ else None]
    return seen


async def redrives(store: EventStore) -> list[Any]:
    report = await verdict(store, "s")
    assert report.ok, report.faults
    recording = await load_recording(store, "s")
    result = await redrive(store, recording)
    assert result.ok, result.divergence
    assert result.compared == len(recording)
    return list(recording.bodies)


async def cancel_mid_turn(
    store: EventStore, make_skill: SkillMaker, kit: type[Kit]
) -> SessionEnded:
    """A real cancel between the answer and the second call's intent: ``tool.called``
    of the load, then the cancel's two results and its end (``closes`` 2)."""
    skill = make_skill("two", files={"scripts/x.py": "print('x')\n"})
    agent = kit.agent(
        [turn(call("skills.load", names=["two"]),
              call("skills.run_script", skill="two", path="scripts/x.py"))],
        [skill], policy=PolicyConfig(sandbox="off"),
    )  # fmt: skip
    with held_after_the_answer() as (held, go):
        ended = await cut_then_cancel(store, agent, held)
        go.set()
    return ended


async def test_a_cancel_between_the_answer_and_an_intent_redrives_from_its_marker(
    make_skill: SkillMaker, kit: type[Kit], tmp_path: Path, marker_only: None
) -> None:
    async with open_sqlite_store(tmp_path / "log.db") as store:
        ended = await cancel_mid_turn(store, make_skill, kit)
        recorded = await redrives(store)
    # The load had its intent: an error result; the script never started: closed last.
    *_, load, script, end = recorded
    assert isinstance(load, ToolCompleted) and load.tool == "skills.load"
    assert isinstance(script, ToolCompleted) and "never ran" in script.content
    assert end == ended and ended.closes == 2


async def test_a_cancel_while_a_script_runs_redrives_from_its_marker(
    make_skill: SkillMaker, kit: type[Kit], tmp_path: Path, marker_only: None
) -> None:
    skill = make_skill("slow", files={"scripts/wait.py": "import time\ntime.sleep(60)\n"})
    agent = kit.agent(
        [turn(call("skills.load", names=["slow"])),
         turn(call("skills.run_script", skill="slow", path="scripts/wait.py"))],
        [skill], policy=PolicyConfig(sandbox="off"),
    )  # fmt: skip
    async with open_sqlite_store(tmp_path / "log.db") as store:
        ended = await cut_then_cancel(store, agent, on_recorded(agent, "script.started"))
        recorded = await redrives(store)
    *_, closed, end = recorded
    assert isinstance(closed, ToolInterrupted | ToolCompleted), closed
    assert closed.tool == "skills.run_script"
    assert end == ended and ended.closes == 1


async def test_a_cancel_while_the_model_streams_redrives_from_its_marker(
    kit: type[Kit], tmp_path: Path, marker_only: None
) -> None:
    agent = kit.agent([])
    agent.model = ScriptedModel([{"text": "a slow answer, in pieces " * 4, "stream_delay_ms": 200}])
    streaming = trio.Event()
    agent.on_delta = lambda delta: streaming.set()
    async with open_sqlite_store(tmp_path / "log.db") as store:
        ended = await cut_then_cancel(store, agent, streaming)
        recorded = await redrives(store)
    assert isinstance(recorded[-2], ModelInterrupted)
    assert ended.closes == 0


async def test_a_cancel_of_a_suspended_session_redrives_from_its_marker(
    marker_only: None,
) -> None:
    """The golden cancel: two calls await approval, a reviewer denies one, the session
    is cancelled. The reviewer's denial is copied as an outside decision (no resume
    after it), the cancel's three events and its end as the cancel's."""
    store = MemoryStore()
    await import_jsonl(store, str(GOLDEN / "cancelled.jsonl"))
    recording = await load_recording(store, "golden-cancelled")
    assert replay._redrive._cancel_start(recording) == len(recording) - 4
    assert (await redrive(store, recording)).ok


async def test_a_session_cancelled_before_it_was_driven_redrives(
    kit: type[Kit], tmp_path: Path, marker_only: None
) -> None:
    agent = kit.agent([])
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await agent.start(store, session_id="s", task="never mind")
        ended = await record_cancel(store, "s", by="sam")
        recorded = await redrives(store)
    assert ended.closes == 0 and recorded[-1] == ended


# -- a forged or missing marker ---------------------------------------------------------


async def golden(name: str) -> MemoryStore:
    store = MemoryStore()
    await import_jsonl(store, str(GOLDEN / f"{name}.jsonl"))
    return store


async def forged(source: EventStore, session: str, edit: Edit) -> MemoryStore:
    """``session`` appended anew as ``s`` with ``edit`` applied to each event (seq,
    type, body, recorded_at): what someone with write access can do, every hash right."""
    events = []
    async for e in source.read(session):
        body, at = edit(e.seq, e.type, msgspec.json.decode(e.body), e.recorded_at)
        events.append(NewEvent(type=e.type, body=msgspec.json.encode(body), recorded_at=at))
    target = MemoryStore()
    blobs = [data async for _, data in source.read_blobs()]
    await target.append("s", events, expected_seq=0, blobs=blobs)
    return target


def end_with(**fields: Any) -> Edit:
    """Set (None: remove) fields of ``session.ended``."""

    def edit(seq: int, type_: str, body: dict[str, Any], at: int) -> tuple[dict[str, Any], int]:
        if type_ == "session.ended":
            body = {k: v for k, v in {**body, **fields}.items() if v is not None}
        return body, at

    return edit


async def finding(store: MemoryStore) -> str:
    report = await verdict(store, "s")
    assert not report.ok and report.fault is not None
    assert (report.fault.kind, report.fault.rule) == ("grammar", "cancel_marker"), report.fault
    return report.fault.detail


@pytest.fixture
async def mid_turn(make_skill: SkillMaker, kit: type[Kit]) -> MemoryStore:
    store = MemoryStore()
    await cancel_mid_turn(store, make_skill, kit)
    return store


async def test_a_forged_copy_of_a_real_cancel_verifies() -> None:
    assert (
        await verdict(await forged(await golden("cancelled"), "golden-cancelled", end_with()), "s")
    ).ok


async def test_a_marker_counting_an_event_of_another_time_is_found() -> None:
    """One more: the reviewer's denial, a kind a cancel writes, but recorded by another
    process at another time (a different stamp proves it; an equal one would not)."""
    store = await forged(await golden("cancelled"), "golden-cancelled", end_with(closes=4))
    assert (await finding(store)).startswith(
        "closes 4 counts seq 15 (approval.resolved), stamped 1767226600001000000, "
        "the end 1767227600002000000"
    )


async def test_a_marker_counting_a_drivers_event_is_found(mid_turn: MemoryStore) -> None:
    store = await forged(mid_turn, "s", end_with(closes=3))
    detail = await finding(store)
    assert (
        detail.startswith("closes 3 counts seq ")
        and "(tool.called), which a cancel does not write" in detail
    )


async def test_a_marker_past_what_a_cancel_can_write_is_found() -> None:
    store = await forged(await golden("cancelled"), "golden-cancelled", end_with(closes=5))
    assert await finding(store) == (
        "closes 5: the cancel wrote at least the 0 closes of calls that never started "
        "and at most 4 events"
    )


async def test_a_marker_leaving_out_a_never_started_close_is_found(mid_turn: MemoryStore) -> None:
    assert (await verdict(await forged(mid_turn, "s", end_with()), "s")).ok
    store = await forged(mid_turn, "s", end_with(closes=0))
    assert (await finding(store)).startswith("closes 0: the cancel wrote at least the 1 closes")


async def test_a_marker_on_an_end_no_cancel_wrote_is_found() -> None:
    store = await forged(await golden("approvals"), "golden-approvals", end_with(closes=0))
    assert await finding(store) == "closes on an end (completed) no cancel wrote"


async def test_a_cancel_without_its_marker_is_found_and_not_redriven() -> None:
    store = await forged(await golden("cancelled"), "golden-cancelled", end_with(closes=None))
    assert (await finding(store)).startswith("no closes (the events the cancel wrote before it)")
    with pytest.raises(BrokenLogError, match="without closes in a session whose rules record it"):
        await redrive(store, await load_recording(store, "s"))


async def test_an_old_sessions_cancel_without_its_marker_verifies_and_redrives() -> None:
    """``cancel_rules`` 0 (recorded before the marker): found by its stamps, as then."""

    def old(seq: int, type_: str, body: dict[str, Any], at: int) -> tuple[dict[str, Any], int]:
        body = {k: v for k, v in body.items() if k not in ("cancel_rules", "closes")}
        return body, at

    store = await forged(await golden("cancelled"), "golden-cancelled", old)
    assert (await verdict(store, "s")).ok
    recording = await load_recording(store, "s")
    assert replay._redrive._cancel_start(recording) == len(recording) - 4
    assert (await redrive(store, recording)).ok


@pytest.mark.parametrize("closes", [3, 4])
async def test_the_marker_is_checked_whatever_the_batches_of_rows(closes: int) -> None:
    """Verify feeds a stream's rows in batches (a PostgreSQL cursor's cut anywhere):
    the cancel's rows may come in earlier batches than its end."""
    store = await forged(await golden("cancelled"), "golden-cancelled", end_with(closes=closes))
    rows = [(e.seq, e.type, e.recorded_at, e.body) async for e in store.read("s")]
    for size in range(1, len(rows) + 1):
        grammar = session_grammar("s")
        found = [grammar.feed(rows[i : i + size]) for i in range(0, len(rows), size)]
        rules = [(v.seq, v.rule) for v in found if v is not None]
        assert rules == ([] if closes == 3 else [(len(rows) - 1, "cancel_marker")]), size


async def test_the_marker_is_checked_in_every_store(catalog_store: EventStore) -> None:
    """The same finding on SQLite and PostgreSQL, whose verify reads rows its own way."""
    source = await golden("cancelled")
    for sid, edit in (("ok", end_with()), ("bad", end_with(closes=4))):
        copy = await forged(source, "golden-cancelled", edit)
        events = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
                  async for e in copy.read("s")]  # fmt: skip
        blobs = [data async for _, data in source.read_blobs()]
        await catalog_store.append(sid, events, expected_seq=0, blobs=blobs)
    assert (await verdict(catalog_store, "ok")).ok
    report = await verdict(catalog_store)
    assert [(f.stream, f.rule) for f in report.faults] == [("bad", "cancel_marker")]
