"""``skillog otel export`` and ``skillog otel metrics`` through the CLI, on a SQLite log."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from eventlog import open_sqlite_store
from orchestrator.cli import main


def _make_db(kit: Any, path: Path, sessions: dict[str, bool]) -> None:
    async def fill() -> None:
        async with open_sqlite_store(path) as store:
            for i, (name, ended) in enumerate(sessions.items()):
                await kit.append_session(store, name, kit.T0 + i * 10**9, end=ended)

    trio.run(fill)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(kit: Any, tmp_path: Path) -> Path:
    path = tmp_path / "skillog.db"
    _make_db(kit, path, {"s1": True, "s2": True, "live": False})
    return path


def test_export_all_then_resume(
    db: Path, receiver: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _digest(db)
    assert main(["otel", "export", "--all", "--endpoint", receiver.url, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"exported 2 sessions (18 spans) to {receiver.url}/v1/traces" in out
    assert "1 not ended yet: live" in out
    assert len(receiver.spans) == 18
    state = json.loads(Path(f"{db}.otel-state.json").read_text())
    assert set(state["exported"]) == {"s1", "s2"}

    assert main(["otel", "export", "--all", "--endpoint", receiver.url, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "exported 0 sessions (0 spans)" in out and "2 already exported" in out
    assert len(receiver.requests) == 1
    assert _digest(db) == before  # the log is only read


def test_export_a_named_session_with_content(
    db: Path, receiver: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["otel", "export", "s1", "--content", "--endpoint", receiver.url, "--db", str(db)]
    assert main(args) == 0
    chats = [s for s in receiver.spans if s.name.startswith("chat")]
    assert "Summarize report.pdf" in receiver.attrs(chats[0])["gen_ai.input.messages"]


def test_refused_endpoint_exits_2_with_a_clear_message(
    db: Path, closed_port_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["otel", "export", "--all", "--endpoint", closed_port_url, "--db", str(db)]
    # Default retries, yet nothing is retried: it used to take ~32 s of SDK backoff.
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("skillog otel: error: cannot send session 's1'")
    assert "cannot connect to 127.0.0.1" in err and "run the command again" in err
    assert len(err.strip().splitlines()) == 1
    assert not Path(f"{db}.otel-state.json").exists()


def test_broken_chain_exits_2_and_sends_nothing(
    db: Path, receiver: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE events SET body = CAST(replace(body, 'demo-agent', 'evil-agent') AS BLOB) "
            "WHERE stream = 's2' AND seq = 0"
        )
    conn.close()
    assert main(["otel", "export", "--all", "--endpoint", receiver.url, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "stream 's2' seq 0: modified" in err and "nothing was exported" in err
    assert receiver.attempts == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["otel", "export", "--endpoint", "http://127.0.0.1:1"], "pass --all"),
        (["otel", "export", "s1", "--all"], "not both"),
        (["otel", "export", "--all", "--endpoint", "127.0.0.1:4318"], "not an http(s) URL"),
        (["otel", "export", "ghost", "--endpoint", "http://127.0.0.1:1"], "no session 'ghost'"),
        (["otel", "export", "live", "--endpoint", "http://127.0.0.1:1"], "has not ended"),
        (["otel", "metrics", "ghost"], "no session 'ghost'"),
    ],
)
def test_unusable_input_exits_2(
    db: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--db", str(db)]) == 2
    assert message in capsys.readouterr().err


def test_missing_database_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.db"
    assert main(["otel", "metrics", "--all", "--db", str(missing)]) == 2
    assert "nope.db" in capsys.readouterr().err
    assert not missing.exists()


def test_corrupt_state_file_exits_2(
    db: Path, receiver: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    Path(f"{db}.otel-state.json").write_text("{not json")
    assert main(["otel", "export", "--all", "--endpoint", receiver.url, "--db", str(db)]) == 2
    assert "delete it to export every session again" in capsys.readouterr().err


def test_metrics_text_and_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["otel", "metrics", "--all", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "session s1: ended (error), 4 turns" in text
    assert "session live: in progress" in text
    assert "all sessions (3)" in text

    assert main(["otel", "metrics", "s1", "--json", "--db", str(db)]) == 0
    data = json.loads(capsys.readouterr().out)
    (s1,) = data["sessions"]
    assert s1["skills"]["pdf"] == {
        "activation_failures": 0,
        "activations": 1,
        "policy_denials": 0,
        "resource_reads": 1,
        "script_failures": 1,
        "script_runs": 1,
    }
    assert data["skills"]["csv-tools"]["policy_denials"] == 1
    assert (s1["input_tokens"], s1["output_tokens"]) == (840, 95)


def test_help_describes_both_actions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["otel", "export", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--all", "--follow", "--endpoint", "--content", "--timeout", "--retries"):
        assert option in out


def test_export_json_is_the_report(
    db: Path, receiver: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["otel", "export", "--all", "--json", "--endpoint", receiver.url, "--db", str(db)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress line when asked for JSON (or when piped)
    assert json.loads(out) == {
        "sessions": 2,
        "spans": 18,
        "already_exported": 0,
        "open_sessions": ["live"],
        "endpoint": f"{receiver.url}/v1/traces",
    }


def test_all_means_sessions_not_leases_or_indexing_runs(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every `skillog run` records its indexing run (stream skills-index) and the fleet
    keeps lease streams: neither is a session to export or summarize."""
    from orchestrator._events import CODEC, LeaseReleased
    from orchestrator._index_log import record_index_run
    from orchestrator.skills import CatalogRecord

    async def more_streams() -> None:
        async with open_sqlite_store(db) as store:
            await record_index_run(
                store, CatalogRecord(entries=(), rejected=(), shadowed=(), notes=())
            )
            queued = CODEC.encode(LeaseReleased(worker="w", outcome="queued"), recorded_at=1)
            await store.append("lease/s1", [queued], expected_seq=0)

    trio.run(more_streams)
    assert main(["otel", "metrics", "--all", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "session s1" in out and "skills-index" not in out and "lease/" not in out
