"""Cancelling a session between the model's answer and the intent of a call it asked
for (``orchestrator._cancel``): the call is closed as never started, and a driver that
would go on finds the session moved on: write-ahead, it never starts the call.

The script writes a marker file: the control run (no cancel) shows it would have."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from eventlog import ConcurrencyError, open_sqlite_store
from orchestrator import PolicyConfig
from orchestrator._events import SessionEnded, ToolCalled, ToolCompleted
from orchestrator._session import Session

from .conftest import Kit, SkillMaker, bodies, call, turn


def _script_agent(make_skill: SkillMaker, marker: Path, kit: type[Kit]):  # type: ignore[no-untyped-def]
    skill = make_skill(
        "marker", files={"scripts/mark.py": f"open({str(marker)!r}, 'w').write('ran')\n"}
    )
    return kit.agent(
        [turn(call("skills.load", names=["marker"]), call("skills.run_script",
              skill="marker", path="scripts/mark.py"), text="Loading and running.")],
        [skill],
        policy=PolicyConfig(sandbox="off"),  # the marker is outside the skill directory
    )  # fmt: skip


@contextlib.contextmanager
def held_after_the_answer() -> Iterator[tuple[trio.Event, trio.Event]]:
    """Hold drivers in this process right after they record a model answer that asks
    for tools (its first call's intent is in the same transaction, the next call's is
    not); ``(held, go)``: set once one is held, set to let it go on."""
    held, go = trio.Event(), trio.Event()
    original = Session.run_tools

    async def hold(self: Session) -> list[str]:
        held.set()
        await go.wait()
        return await original(self)

    Session.run_tools = hold  # type: ignore[method-assign]
    try:
        yield held, go
    finally:
        Session.run_tools = original  # type: ignore[method-assign]


async def test_the_control_run_writes_the_marker(
    make_skill: SkillMaker, kit: type[Kit], tmp_path: Path
) -> None:
    marker = tmp_path / "script-ran"
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await _script_agent(make_skill, marker, kit).run(store, "go")
    assert session.state.status == "ended" and marker.read_text() == "ran"


async def test_skillog_cancel_between_the_answer_and_a_calls_intent(
    make_skill: SkillMaker, kit: type[Kit], tmp_path: Path
) -> None:
    """``skillog cancel`` (a real process) while a driver is held right after the
    model's answer: the load (intent recorded) and the script call (no intent) are
    closed, the session ends; the driver, let go, fails on its next append (the seq it
    expects has moved on) and the script never runs. Verify, replay and re-drive pass."""
    marker = tmp_path / "script-ran"
    db = tmp_path / "log.db"
    agent = _script_agent(make_skill, marker, kit)
    async with open_sqlite_store(db) as store:
        with held_after_the_answer() as (held, go):
            failed: list[BaseException] = []

            async def drive() -> None:
                try:
                    await agent.run(store, "go", session_id="s1")
                except* ConcurrencyError as group:
                    failed.extend(group.exceptions)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(drive)
                with trio.fail_after(30):
                    await held.wait()
                done = await trio.to_thread.run_sync(
                    lambda: kit.skillog("cancel", "s1", "--db", db, "--by", "sam",
                                        "--reason", "wrong task", cwd=tmp_path)
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                assert "cancelled session s1" in done.stdout
                go.set()
        assert len(failed) == 1, failed
        recorded = await bodies(store, "s1")
    assert not marker.exists()
    assert [b.tool for b in recorded if isinstance(b, ToolCalled)] == ["skills.load"]
    *_, load, script, ended = recorded
    assert isinstance(load, ToolCompleted) and load.error_type == "cancelled"
    assert isinstance(script, ToolCompleted) and script.tool == "skills.run_script"
    assert script.is_error and script.error_type == "cancelled" and "never ran" in script.content
    assert isinstance(ended, SessionEnded) and ended.reason == "cancelled"
    assert ended.error == "cancelled by sam: wrong task"
    for check in (["log", "verify"], ["replay", "s1", "--redrive"]):
        result = kit.skillog(*check, "--db", db, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    # Nothing drives it on: a resume finds it ended, a second cancel is refused.
    again = kit.skillog("cancel", "s1", "--db", db, cwd=tmp_path)
    assert again.returncode != 0 and "already ended" in again.stderr


@pytest.mark.parametrize("missing", ["nope"])
def test_skillog_cancel_of_an_unknown_session_is_a_clear_error(
    kit: type[Kit], tmp_path: Path, missing: str
) -> None:
    done = kit.skillog("cancel", missing, "--db", tmp_path / "log.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"skillog cancel: error: no session {missing!r} in this log"
