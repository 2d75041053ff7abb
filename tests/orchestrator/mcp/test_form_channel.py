"""MCP forms answered from another process (issue 24, item 10): a session whose driver
has nobody to ask records the form, and it waits, listed by ``skillog approvals``,
until ``skillog approvals answer`` writes the answer into ``forms/<session>``; the
driver takes it and names it in ``mcp.elicitation_answered``. The driver SIGKILLed
while a form waits: the answer is kept and the same form asked again on resume takes
it. Late and hostile answers are refused with nothing written; ``log verify`` finds an
answer the session names but the log does not hold; every session re-drives."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import trio

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, McpElicitationAnswered, McpElicited, ToolCompleted
from orchestrator._streams import forms_stream

from .test_mcp_sessions import _replay_cli

WORKER = Path(__file__).with_name("mcp_worker.py")
SKILLOG = str(Path(sys.executable).with_name("skillog"))
SESSION = "formed"


async def _skillog(*args: str) -> tuple[int, str]:
    done = await trio.run_process(
        [SKILLOG, *args], capture_stdout=True, capture_stderr=True, check=False
    )
    return done.returncode, (done.stdout + done.stderr).decode()


async def _pending(db: Path) -> list[dict[str, Any]]:
    if not await trio.Path(db).exists():
        return []
    code, out = await _skillog("approvals", "--db", str(db), "--json")
    if code != 0:  # the database is being created
        return []
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "form"]


async def _wait_pending(db: Path, worker: trio.Process) -> dict[str, Any]:
    with trio.fail_after(60):
        while True:
            forms = await _pending(db)
            if forms:
                (form,) = forms
                return form
            assert worker.poll() is None, "the worker ended before its form was asked"
            await trio.sleep(0.1)


async def _events(db: Path, stream: str = SESSION) -> list[Any]:
    async with open_sqlite_store(db) as store:
        return [CODEC.decode(e) async for e in store.read(stream)]


def _worker(mode: str, db: Path, server_dir: Path) -> list[str]:
    return [sys.executable, str(WORKER), mode, str(db), str(server_dir)]


async def test_a_worker_form_answered_by_skillog_approvals_answer(
    tmp_path: Path, server_dir: Path
) -> None:
    db = tmp_path / "log.db"
    worker = await trio.lowlevel.open_process(_worker("form-run", db, server_dir), env=os.environ)
    try:
        form = await _wait_pending(db, worker)
        assert (form["session_id"], form["call_id"], form["index"]) == (SESSION, "f1", 0)
        assert form["message"] == "Who are you?" and form["server"] == "modern"
        code, listing = await _skillog("approvals", "--db", str(db))
        assert code == 0 and "form 0 from MCP server modern" in listing, listing
        assert "- age (integer)" in listing and "- name (string, required)" in listing
        code, out = await _skillog(
            "approvals", "answer", SESSION, "f1", "--db", str(db), "--accept",
            "--set", "name=Ada", "--set", "age=42", "--by", "alice",
        )  # fmt: skip
        assert code == 0, out
        assert "accepted form 0 of call f1" in out
        with trio.fail_after(60):
            assert await worker.wait() == 0
    finally:
        worker.kill()
        await worker.wait()
    events = await _events(db)
    (answered,) = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert (answered.action, answered.decided_by) == ("accept", "alice")
    assert json.loads(answered.content or "") == {"name": "Ada", "age": 42}
    (stored,) = [e async for e in _read(db, forms_stream(SESSION))]
    assert answered.answer == stored.hash
    done = [json.loads(e.content) for e in events if isinstance(e, ToolCompleted)]
    assert done == [{"action": "accept", "content": {"name": "Ada", "age": 42}}]
    # a late answer: the form is no longer pending
    code, out = await _skillog("approvals", "answer", SESSION, "f1", "--db", str(db), "--decline")
    assert code == 2 and "session formed has ended" in out, out
    assert await _pending(db) == []
    await _verified_and_redriven(db, server_dir)
    # the answer the session names, removed from (a copy of) the log: verify says so
    tampered = tmp_path / "tampered.db"
    with sqlite3.connect(db) as source, sqlite3.connect(tampered) as copy:
        source.backup(copy)
        copy.execute("DELETE FROM events WHERE stream = ?", [forms_stream(SESSION)])
    code, out = await _skillog("log", "verify", "--db", str(tampered))
    assert code == 1 and "form_answer" in out and "not in the log" in out, out
    # archived, the session takes its forms' answers along
    key = str(tmp_path / "k.pem")
    assert (await _skillog("log", "keygen", "--out", key))[0] == 0
    await trio.sleep(1.1)  # --before has seconds; the session ended before it
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    archive = ["log", "archive", "--db", str(db), "--before", now, "--key", key]
    code, out = await _skillog(*archive, "--out", str(tmp_path / "a.jsonl"))
    assert code == 0, out
    assert [e async for e in _read(db, forms_stream(SESSION))] == []
    code, out = await _skillog("log", "verify", "--db", str(db))
    assert code == 0, out


async def _verified_and_redriven(db: Path, server_dir: Path) -> None:
    """``log verify`` passes and the session re-drives with its server gone."""
    code, out = await _skillog("log", "verify", "--db", str(db))
    assert code == 0, out
    (server_dir / "mcp_server.py").unlink()
    code, out = await _replay_cli(db, SESSION)
    assert code == 0, out


async def _read(db: Path, stream: str) -> Any:
    async with open_sqlite_store(db) as store:
        async for event in store.read(stream):
            yield event


async def test_the_driver_dies_while_a_form_waits_then_resume_takes_the_answer(
    tmp_path: Path, server_dir: Path
) -> None:
    db = tmp_path / "log.db"
    worker = await trio.lowlevel.open_process(_worker("form-run", db, server_dir), env=os.environ)
    try:
        await _wait_pending(db, worker)
        worker.kill()
        await worker.wait()
    finally:
        worker.kill()
        await worker.wait()
    answer = ["approvals", "answer", SESSION, "f1", "--db", str(db)]
    # hostile values: refused with what to do, nothing written
    for values, said in [
        (["--set", "age=old"], "takes an integer, not 'old'"),
        (["--set", "name=Ada", "--set", "evil=1"], "has no field 'evil'"),
        (["--set", "name=\x1b[31mAda"], "control character U+001B"),
        (["--set", "name=" + "x" * 10_000], "at most 8192"),
        (["--set", "age=7"], "'name' is a required property"),
        (["--set", "name"], "write FIELD=VALUE"),
        ([], "say --accept"),
    ]:
        code, out = await _skillog(*answer, *(["--accept"] if values else []), *values)
        assert code == 2 and said in out, (values, out)
        assert "Traceback" not in out and "\x1b" not in out
    assert [e async for e in _read(db, forms_stream(SESSION))] == []
    assert len(await _pending(db)) == 1  # still waiting, after the driver died
    code, out = await _skillog("sessions", "--db", str(db))
    assert code == 0 and "open: waiting for input (1 form)" in out, out
    code, out = await _skillog(*answer, "--accept", "--set", "name=Grace", "--by", "bob")
    assert code == 0, out
    assert await _pending(db) == []  # answered: kept for the session to take
    code, out = await _skillog("log", "verify", "--db", str(db))
    assert code == 0, out  # the forms stream's grammar, the catalog as the log folds
    code, out = await _skillog(*answer, "--decline")
    assert code == 2 and "already answered" in out, out
    resumed = await trio.run_process(
        _worker("form-resume", db, server_dir), capture_stderr=True, check=False
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    events = await _events(db)
    asked = [e for e in events if isinstance(e, McpElicited)]
    (answered,) = [e for e in events if isinstance(e, McpElicitationAnswered)]
    # recorded once: the call run again asked the same form, and took the kept answer
    assert [(e.call_id, e.index) for e in asked] == [("f1", 0)]
    assert answered.answer
    assert (answered.action, answered.decided_by) == ("accept", "bob")
    done = [json.loads(e.content) for e in events if isinstance(e, ToolCompleted)]
    assert done == [{"action": "accept", "content": {"name": "Grace"}}]
    await _verified_and_redriven(db, server_dir)


async def test_a_resumed_session_waits_on_the_log_for_its_form_as_a_fresh_one_does(
    tmp_path: Path, server_dir: Path
) -> None:
    """What a resumed session does with a form nobody answered (docs/mcp.md, "Why a
    form waits instead of suspending"): the call runs again (idempotent), its server
    asks the same form, and the driver waits on the log for it up to the session's
    recorded timeout, as a fresh session does; no answer: ``cancel`` by ``timeout``
    (not ``nobody``), the form no longer pending, the session goes on and ends. The
    timeout leaves the test time to see the form pending (a ``skillog approvals`` run
    each time, 1-2 s on a loaded machine) and kill the driver before it expires."""
    db = tmp_path / "log.db"
    env = {**os.environ, "FORM_TIMEOUT_MS": "6000"}
    worker = await trio.lowlevel.open_process(_worker("form-run", db, server_dir), env=env)
    try:
        await _wait_pending(db, worker)  # asked, nobody to answer: killed while it waits
    finally:
        worker.kill()
        await worker.wait()
    assert len(await _pending(db)) == 1
    resumed = await trio.run_process(
        _worker("form-resume", db, server_dir), capture_stderr=True, check=False, env=env
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    events = await _events(db)
    assert [(e.call_id, e.index) for e in events if isinstance(e, McpElicited)] == [("f1", 0)]
    (answered,) = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert (answered.action, answered.decided_by) == ("cancel", "timeout")
    assert "within 6000 ms" in answered.reason
    assert await _pending(db) == []
    await _verified_and_redriven(db, server_dir)
