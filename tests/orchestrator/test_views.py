"""The auditor's SQL views (docs/log-format.md, "Auditing with SQL"): the documented
queries run with the real sqlite3 shell on a demo log, and the views follow the reader
rule and the write-ahead events."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from eventlog import NewEvent, open_sqlite_store
from orchestrator import AUDIT_VIEWS

DOC = Path(__file__).parents[2] / "docs" / "log-format.md"


def example(marker: str) -> str:
    match = re.search(rf"<!-- {marker} -->\n```sh\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"{marker} block missing from {DOC}"
    return match.group(1)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("demo")
    run = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "demo", "--db", "skillog.db"],
        cwd=where,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return where


def query(where: Path, marker: str) -> list[list[str]]:
    out = subprocess.run(
        ["sh", "-e", "-c", example(marker)], cwd=where, capture_output=True, text=True, check=True
    )
    return [line.split("|") for line in out.stdout.splitlines()]


needs_sqlite3 = pytest.mark.skipif(not shutil.which("sqlite3"), reason="needs the sqlite3 shell")


@needs_sqlite3
def test_the_documented_queries_answer_from_a_demo_log(demo: Path) -> None:
    [[_, model, status, turns, events]] = query(demo, "audit-sessions")
    assert (model, status, turns, events) == ("demo-script", "completed", "5", "27")
    calls = query(demo, "audit-tool-calls")
    assert [c[1] for c in calls] == [
        "skills.load",
        "skills.read",
        "skills.run_script",
        "send_report",
    ]
    assert calls[-1][2:] == ["completed", "1", "allowed-tools"]
    assert query(demo, "audit-failures") == [["send_report", "1"]]
    [[skill, path, _, network, status, exit_code]] = query(demo, "audit-scripts")
    assert (skill, path, network, status, exit_code) == (
        "csv-insights",
        "scripts/summarize.py",
        "0",
        "ok",
        "0",
    )
    [[_, responses, _, _, tool_calls]] = query(demo, "audit-usage")
    assert (responses, tool_calls) == ("5", "4")
    assert query(demo, "audit-approvals") == []


def body(**fields: object) -> bytes:
    return msgspec.json.encode(fields, order="sorted")


async def test_views_show_outcomes_interruptions_pending_work_and_no_strays(
    tmp_path: Path,
) -> None:
    db = tmp_path / "skillog.db"
    events = [
        ("session.started", body(agent="a", provider="p", model="m")),
        ("prompt.rendered", body(turn=1)),
        ("tool.called", body(turn=1, call_id="c1", tool="t", arguments="{}")),  # no effect
        ("tool.called", body(turn=1, call_id="c2", tool="u", arguments="{}", effect="pure")),
        ("tool.called", body(turn=1, call_id="c3", tool="v", arguments="{}")),
        ("approval.requested", body(call_id="c3", tool="v", action="run")),
        ("tool.completed", body(call_id="c2", tool="u", is_error=False, content="ok")),
        ("script.started", body(call_id="c4", skill="s", path="x.py", args=[])),
        ("tool.interrupted", body(call_id="c1", tool="t", content="process died")),
        ("session.suspended", body(reason="awaiting_approval", call_ids=["c3"])),
    ]
    async with open_sqlite_store(db, migrations=[AUDIT_VIEWS]) as store:
        await store.append(
            "s1",
            [NewEvent(type=t, body=b, recorded_at=i) for i, (t, b) in enumerate(events)],
            expected_seq=0,
        )
    conn = sqlite3.connect(db)
    with conn:  # a stray: a forged call outside the chain must not be shown
        conn.execute(
            "INSERT INTO events (stream, seq, type, recorded_at, body, prev_hash, hash) "
            "VALUES ('s1', -1, 'tool.called', 0, CAST(? AS BLOB), '', '')",
            (body(turn=0, call_id="forged", tool="t", arguments="{}").decode(),),
        )
    rows = conn.execute(
        "SELECT call_id, effect, outcome, is_error, error_type, content, approval "
        "FROM audit_tool_calls ORDER BY seq"
    ).fetchall()
    assert rows == [
        ("c1", "at-most-once", "interrupted", 1, "interrupted", "process died", None),
        ("c2", "pure", "completed", 0, None, "ok", None),
        ("c3", "at-most-once", "pending", None, None, None, None),
    ]
    assert conn.execute("SELECT status, turns, events FROM audit_sessions").fetchall() == [
        ("suspended", 1, 10)
    ]
    assert conn.execute("SELECT call_id, status FROM audit_scripts").fetchall() == [
        ("c4", "started")
    ]
    assert conn.execute("SELECT call_id, decision FROM audit_approvals").fetchall() == [
        ("c3", "pending")
    ]
    with pytest.raises(sqlite3.OperationalError, match="cannot modify"):
        conn.execute("DELETE FROM audit_tool_calls")
    conn.close()
