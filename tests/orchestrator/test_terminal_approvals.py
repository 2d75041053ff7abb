"""One human channel for approvals: ``skillog run`` on a terminal (a real pty) asks
there, while the request is pending in the log for ``skillog approve``/``deny`` from
another process. The first decision in the log holds and is recorded once, naming who
gave it; the terminal's question is withdrawn with a line saying who decided, and a
decision that comes second is refused. (Before, ``skillog approve`` was told to resume
a session its driver was still asking about, and the terminal's answer then stopped
the driver: "moved on in another driver".)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import trio
from terminal import SKILLOG, Pty

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, ApprovalResolved, ScriptStarted

ASKED = b"[y/s/p/x/N]"


def _skillog(db: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, "USER": "auditor", "LOGNAME": "auditor"}
    done = subprocess.run(
        [SKILLOG, *args, "--db", str(db)], capture_output=True, text=True, check=False, env=env
    )
    return done.returncode, done.stdout + done.stderr


def _start(tmp_path: Path) -> tuple[Pty, Path]:
    skill = tmp_path / "skills" / "tidy"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: tidy\ndescription: Tidy up.\n---\nTidy.\n")
    (skill / "scripts" / "tidy.sh").write_text("echo tidied\n")
    run = [{"id": f"a{n}", "name": "skills.run_script", "arguments": {"path": "scripts/tidy.sh"}}
           for n in (1, 2)]  # fmt: skip
    turns = tmp_path / "turns.yaml"
    turns.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [tidy]}}]\n"
        f"  - tool_calls: [{json.dumps(run[0])}]\n"
        f"  - tool_calls: [{json.dumps(run[1])}]\n"  # keeps the session open meanwhile
        "  - text: all tidy\n"
    )
    db = tmp_path / "log.db"
    env = {**os.environ, "HOME": str(tmp_path), "USER": "tess", "LOGNAME": "tess"}
    args = ["run", "tidy up", "--model", f"scripted:{turns}", "--skills", str(skill)]
    return Pty([*args, "--db", str(db)], tmp_path, env), db


def _pending(db: Path) -> dict[str, Any]:
    code, out = _skillog(db, "approvals", "--json")
    assert code == 0, out
    (pending,) = [json.loads(line) for line in out.splitlines()]
    return pending


def _recorded_once(db: Path, session: str, decided: list[tuple[str, bool, str]]) -> None:
    """Each call decided once, by whom ``decided`` says; the approved one ran; the log
    verifies and re-drives."""

    async def read() -> list[Any]:
        async with open_sqlite_store(db) as store:
            return [CODEC.decode(e) async for e in store.read(session)]

    events = trio.run(read)
    decisions = [e for e in events if isinstance(e, ApprovalResolved)]
    assert [(d.call_id, d.approved, d.decided_by) for d in decisions] == decided
    assert sum(isinstance(e, ScriptStarted) for e in events) == 1
    for check in [("log", "verify"), ("replay", session, "--redrive")]:
        code, out = _skillog(db, *check)
        assert code == 0, out


def test_a_decision_from_another_process_withdraws_the_terminal_question(
    tmp_path: Path,
) -> None:
    run, db = _start(tmp_path)
    try:
        asked = run.expect(ASKED)
        session = _pending(db)["session_id"]
        code, out = _skillog(db, "approve", session, "a1")
        assert code == 0 and "its driver takes it now" in out, out
        at = run.expect(b"(approval of call a1 withdrawn: approved by auditor first)", asked)
        run.expect(ASKED, at)  # the second call's question
        code, out = _skillog(db, "deny", session, "a1")
        assert code == 2 and "already approved by auditor" in out, out
        run.send("n")
        assert run.finish() == 0, run.seen
    finally:
        run.kill()
    assert b"Traceback" not in run.seen and b"moved on" not in run.seen, run.seen
    _recorded_once(db, session, [("a1", True, "auditor"), ("a2", False, "terminal (tess)")])


def test_a_decision_at_the_terminal_refuses_a_later_one_from_another_process(
    tmp_path: Path,
) -> None:
    run, db = _start(tmp_path)
    try:
        asked = run.expect(ASKED)
        session = _pending(db)["session_id"]
        run.send("y")
        at = run.expect(ASKED, asked)  # the second call's question: the first is decided
        code, out = _skillog(db, "deny", session, "a1")
        assert code == 2 and "already approved by terminal (tess)" in out, out
        code, out = _skillog(db, "deny", session, "a2", "--reason", "enough")
        assert code == 0, out
        run.expect(b"(approval of call a2 withdrawn: denied by auditor first)", at)
        assert run.finish() == 0, run.seen
    finally:
        run.kill()
    _recorded_once(db, session, [("a1", True, "terminal (tess)"), ("a2", False, "auditor")])
