"""Same bytes, any store: the demo session moved SQLite -> PostgreSQL -> SQLite keeps
every hash; verify and replay give the same verdicts on both; every CLI takes a
postgresql:// --db (and $SKILLOG_DB)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from eventlog import EventStore, export_jsonl, import_jsonl, open_store, verify
from orchestrator._grammar import session_grammar
from replay import load_recording, replay_session

Cli = Callable[..., tuple[int, str, str]]
DEMO = Path(__file__).parents[1] / "golden" / "demo.jsonl"
SESSION = "golden-demo"


async def exported(store: EventStore) -> bytes:
    out = io.BytesIO()
    await export_jsonl(store, out)
    return out.getvalue()


async def verdicts(store: EventStore) -> tuple[object, ...]:
    recording = await load_recording(store, SESSION)
    replayed = await replay_session(store, recording)
    return (await verify(store, grammar=session_grammar), replayed, await store.streams())


async def test_a_session_keeps_every_hash_sqlite_postgres_sqlite(
    tmp_path: Path, pg_dsn: str
) -> None:
    async with open_store(tmp_path / "a.db") as sqlite:
        await import_jsonl(sqlite, str(DEMO))
        first = await exported(sqlite)
        expected = await verdicts(sqlite)
    (tmp_path / "a.jsonl").write_bytes(first)
    async with open_store(pg_dsn) as pg:
        await import_jsonl(pg, str(tmp_path / "a.jsonl"))
        second = await exported(pg)
        assert await verdicts(pg) == expected
    assert second == first
    (tmp_path / "b.jsonl").write_bytes(second)
    async with open_store(f"sqlite:{tmp_path / 'b.db'}") as back:
        await import_jsonl(back, str(tmp_path / "b.jsonl"))
        assert await exported(back) == first
        assert await verdicts(back) == expected
    report, replayed, _ = expected
    assert report.ok and replayed.ok  # type: ignore[attr-defined]
    assert report.events > 10 and report.blobs > 0  # type: ignore[attr-defined]


def test_the_clis_run_verify_replay_and_move_a_session_on_postgres(
    cli: Cli, tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = cli("demo", "--db", pg_dsn)
    assert code == 0, out
    assert "s3cret" not in out  # the demo names the database without its password
    session = out.split("session ", 1)[1].split()[0]
    assert cli("log", "verify", "--db", pg_dsn)[:2][0] == 0
    code, out, _ = cli("replay", session, "--db", pg_dsn)
    assert code == 0 and "every request reproduced byte for byte" in out
    monkeypatch.setenv("SKILLOG_DB", pg_dsn)
    code, out, _ = cli("sessions")
    assert code == 0 and session in out and "completed" in out
    code, on_pg, _ = cli("log", "verify")
    assert code == 0 and on_pg.startswith("ok: 1 streams")
    assert cli("log", "export", "--out", tmp_path / "s.jsonl")[0] == 0
    db = tmp_path / "copy.db"
    assert cli("log", "import", tmp_path / "s.jsonl", "--db", db)[0] == 0
    assert cli("log", "verify", "--db", db)[1] == on_pg
    code, out, _ = cli("replay", session, "--db", db)
    assert code == 0 and "every request reproduced byte for byte" in out
    code, out, _ = cli("otel", "metrics", "--all")
    assert code == 0 and "s3cret" not in out
