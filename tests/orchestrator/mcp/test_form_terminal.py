"""One human channel for MCP forms (issue 24, item 10): ``skillog run`` on a terminal
(a real pty) asks a real server's form there, while the form is also pending in the
log for ``skillog approvals answer`` from another process. The first answer holds and
is recorded once, naming who gave it; the terminal's prompt is withdrawn with a line
saying who answered, and an answer that comes second is refused. Both sessions verify
and re-drive with the server gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio
from terminal import SKILLOG, Pty

from eventlog import Event, open_sqlite_store
from orchestrator._events import CODEC, McpElicitationAnswered, ToolCompleted
from orchestrator._streams import forms_stream

from .test_mcp_sessions import _replay_cli

FORM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
ASKED = b"[y/n/C(ancel)]"


def _skillog(db: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [SKILLOG, *args, "--db", str(db)], capture_output=True, text=True, check=False
    )
    return done.returncode, done.stdout + done.stderr


def _start(tmp_path: Path, server_dir: Path) -> tuple[Pty, Path]:
    script = server_dir / "mcp_server.py"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"mcp:\n  servers:\n    modern:\n      command: {sys.executable}\n"
        f"      args: [{script}, modern]\n      call_timeout_ms: 120000\n"
        "      effects: {form: idempotent}\n"
    )
    turns = tmp_path / "turns.yaml"
    calls = [
        {"id": f"f{n}", "name": "mcp__modern__form", "arguments": {"schema": FORM}} for n in (1, 2)
    ]  # the second keeps the session going while the first's late answer is refused
    lines = "".join(f"  - tool_calls: [{json.dumps(c)}]\n" for c in calls)
    turns.write_text(f"turns:\n{lines}  - text: thanks\n")
    db = tmp_path / "log.db"
    env = {
        **os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path), "USER": "tess",
        "LOGNAME": "tess",
    }  # fmt: skip
    run = Pty(
        ["run", "fill it in", "--model", f"scripted:{turns}", "--db", str(db)],
        tmp_path, env,
    )  # fmt: skip
    return run, db


def _pending_form(db: Path) -> dict[str, Any]:
    code, out = _skillog(db, "approvals", "--json")
    assert code == 0, out
    (form,) = [json.loads(line) for line in out.splitlines() if '"form"' in line]
    return form


def _at_the_first_form(tmp_path: Path, server_dir: Path) -> tuple[Pty, Path, str, int]:
    """``skillog run`` on a pty, asking its first form, which is pending in the log too:
    the run, its log, the session and where the question ends in the run's output."""
    run, db = _start(tmp_path, server_dir)
    try:
        asked = run.expect(ASKED)
        return run, db, _pending_form(db)["session_id"], asked
    except BaseException:
        run.kill()
        raise


def _refused_after_the_terminal(db: Path, session: str) -> None:
    """A later answer from the log to the first form, which the terminal answered."""
    code, out = _skillog(db, "approvals", "answer", session, "f1", "--decline", "--by", "bob")
    assert code == 2 and "already answered by terminal (tess)" in out, out


def _taken(db: Path, session: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The session's events, the answers it took and the answers in ``forms/<session>``;
    each answer taken names its event there, in order."""

    async def read() -> tuple[list[Any], list[Event]]:
        async with open_sqlite_store(db) as store:
            events = [CODEC.decode(e) async for e in store.read(session)]
            return events, [e async for e in store.read(forms_stream(session))]

    events, stored = trio.run(read)
    answered = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert [a.answer for a in answered] == [e.hash for e in stored]
    return events, answered, [CODEC.decode(e) for e in stored]


def _verifies_and_redrives(db: Path, session: str, server_dir: Path) -> None:
    code, out = _skillog(db, "log", "verify")
    assert code == 0, out
    (server_dir / "mcp_server.py").unlink()
    code, out = trio.run(_replay_cli, db, session)
    assert code == 0, out


def test_a_form_answered_from_another_process_withdraws_the_terminal_prompt(
    tmp_path: Path, server_dir: Path
) -> None:
    run, db, session, asked = _at_the_first_form(tmp_path, server_dir)
    try:
        answer = ["approvals", "answer", session, "f1"]
        alice = "alice\x1b[2J"  # who answered is shown on the terminal made inert
        code, out = _skillog(db, *answer, "--accept", "--set", "name=Ada", "--by", alice)
        assert code == 0, out
        at = run.expect(b"withdrawn: filled in by alice\\x1b[2J first)", asked)
        run.expect(ASKED, at)  # the second form
        code, out = _skillog(db, *answer, "--decline", "--by", "bob")
        assert code == 2 and "already answered by alice\\x1b[2J" in out, out
        run.send("n")
        assert run.finish() == 0, run.seen
    finally:
        run.kill()
    assert b"Traceback" not in run.seen and b"\x1b" not in run.seen
    events, answered, answers = _taken(db, session)
    assert [(a.call_id, a.action, a.decided_by) for a in answered] == [
        ("f1", "accept", "alice\x1b[2J"),
        ("f2", "decline", "terminal (tess)"),
    ]
    assert answered[0].content == '{"name":"Ada"}'
    assert [(a.call_id, a.decided_by) for a in answers] == [
        ("f1", "alice\x1b[2J"),
        ("f2", "terminal (tess)"),
    ]  # each answer once, and the refused one not at all
    done = [json.loads(e.content) for e in events if isinstance(e, ToolCompleted)]
    assert done == [
        {"action": "accept", "content": {"name": "Ada"}},
        {"action": "decline", "content": None},
    ]
    _verifies_and_redrives(db, session, server_dir)


def test_a_form_answered_at_the_terminal_refuses_a_later_answer_from_the_log(
    tmp_path: Path, server_dir: Path
) -> None:
    run, db, session, asked = _at_the_first_form(tmp_path, server_dir)
    try:
        run.send("y")
        at = run.expect(b"age (integer): ", asked)  # the fields in the form's order
        run.send("")
        run.expect(b"name (string, required): ", at)
        run.send("Grace")
        at = run.expect(ASKED, at)  # the second form: the first is over
        _refused_after_the_terminal(db, session)
        code, out = _skillog(db, "approvals", "answer", session, "f2", "--decline", "--by", "bob")
        assert code == 0, out
        run.expect(b"withdrawn: declined by bob first)", at)
        assert run.finish() == 0, run.seen
    finally:
        run.kill()
    _, answered, answers = _taken(db, session)
    assert [(a.call_id, a.action, a.decided_by) for a in answered] == [
        ("f1", "accept", "terminal (tess)"),
        ("f2", "decline", "bob"),
    ]
    assert answered[0].content == answers[0].content == '{"name":"Grace"}'
    assert [(a.call_id, a.decided_by) for a in answers] == [
        ("f1", "terminal (tess)"),
        ("f2", "bob"),
    ]  # each answer once, and the refused one not at all
    _verifies_and_redrives(db, session, server_dir)


def test_a_form_cancelled_at_the_terminal_is_recorded_as_its_answer(
    tmp_path: Path, server_dir: Path
) -> None:
    run, db, session, asked = _at_the_first_form(tmp_path, server_dir)
    try:
        run.send("c")
        at = run.expect(ASKED, asked)  # the second form: the first is over
        _refused_after_the_terminal(db, session)
        run.send("")  # the default: cancel
        assert run.finish() == 0, run.seen[at:]
    finally:
        run.kill()
    events, answered, answers = _taken(db, session)
    assert [(a.call_id, a.action, a.decided_by) for a in answered] == [
        ("f1", "cancel", "terminal (tess)"),
        ("f2", "cancel", "terminal (tess)"),
    ]
    assert [(a.call_id, a.action, a.decided_by, a.content) for a in answers] == [
        ("f1", "cancel", "terminal (tess)", None),
        ("f2", "cancel", "terminal (tess)", None),
    ]  # in forms/<session> as an accept or a decline is: the channels race for it too
    done = [json.loads(e.content) for e in events if isinstance(e, ToolCompleted)]
    assert done == [{"action": "cancel", "content": None}] * 2
    _verifies_and_redrives(db, session, server_dir)
