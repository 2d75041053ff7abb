"""Issue 14, hole 3: an event forged after ``session.ended`` with a valid chain passed
every check. The session grammar now fails it in every reader that verifies: ``skillog
log verify`` (text and ``--json``, exit 1), ``skillog replay`` and the library."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from eventlog import EventStore, import_jsonl, open_sqlite_store, open_store, verify
from orchestrator._events import CODEC, ToolCompleted
from orchestrator._grammar import session_grammar
from orchestrator.cli import main

GOLDEN = Path(__file__).parents[1] / "golden"
SESSION = "golden-approvals"


async def append_forged(store: EventStore, call_id: str = "call_1_1") -> None:
    """A ``tool.completed`` appended by someone with write access, through the store,
    so every hash is right."""
    head = await store.head(SESSION)
    assert head is not None
    forged = ToolCompleted(
        call_id=call_id, tool="send_email", is_error=False, content="sent again", duration_ms=0
    )
    await store.append(SESSION, [CODEC.encode(forged, recorded_at=1)], expected_seq=head.seq + 1)


def golden_db(path: Path, *, forge: bool) -> str:
    """The golden approvals session in a SQLite log; with ``forge``, a well-chained
    event appended after its ``session.ended``."""

    async def build() -> None:
        async with open_sqlite_store(path) as store:
            await import_jsonl(store, str(GOLDEN / "approvals.jsonl"))
            if forge:
                await append_forged(store)

    trio.run(build)
    return str(path)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_forged_event_after_the_end_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = golden_db(tmp_path / "forged.db", forge=True)

    async def chains_only() -> bool:
        async with open_sqlite_store(db, readonly=True) as store:
            return (await verify(store)).ok

    assert trio.run(chains_only)  # the hole: every chain is intact
    code, out, _ = cli(capsys, "log", "verify", "--db", db)
    assert code == 1
    assert out.startswith(f"FAULT stream {SESSION!r} seq 24: grammar after_end: tool.completed")
    code, out, _ = cli(capsys, "log", "verify", "--json", "--db", db)
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["grammar"] is True
    assert report["faults"] == [
        {
            "kind": "grammar",
            "rule": "after_end",
            "stream": SESSION,
            "seq": 24,
            "detail": "tool.completed after session.ended",
        }
    ]


def test_replay_refuses_a_session_that_breaks_the_grammar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = golden_db(tmp_path / "forged.db", forge=True)
    code, out, err = cli(capsys, "replay", SESSION, "--db", db)
    # As for a broken chain: the log is unusable input (exit 2), nothing is proven.
    assert code == 2 and out == ""
    assert f"session {SESSION} seq 24: the log does not verify: grammar after_end" in err
    assert "the runtime cannot have written this sequence" in err


def test_a_genuine_log_verifies_with_its_grammar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = golden_db(tmp_path / "genuine.db", forge=False)
    code, out, _ = cli(capsys, "log", "verify", "--json", "--db", db)
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["grammar"] and report["faults"] == []
    assert report["events"] == 24 and report["streams"] == 1

    async def library() -> None:
        async with open_sqlite_store(db, readonly=True) as store:
            assert (await verify(store, grammar=session_grammar)).ok

    trio.run(library)


def test_checkpoint_refuses_to_sign_a_log_grown_by_a_forgery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = golden_db(tmp_path / "genuine.db", forge=False)
    key, checkpoints = tmp_path / "key", tmp_path / "cp.jsonl"
    assert cli(capsys, "log", "keygen", "--out", str(key))[0] == 0
    assert cli(capsys, "log", "checkpoint", "--key", str(key), "--out", str(checkpoints),
               "--db", db)[0] == 0  # fmt: skip

    async def forge() -> None:
        async with open_sqlite_store(db) as store:
            await append_forged(store, "ghost")

    trio.run(forge)
    code, _, err = cli(
        capsys, "log", "checkpoint", "--key", str(key), "--out", str(checkpoints), "--db", db
    )
    assert code == 2 and "refusing to sign" in err and "grammar after_end" in err


async def test_the_grammar_reads_postgres_rows_too(pg_dsn: str) -> None:
    async with open_store(pg_dsn) as store:
        await import_jsonl(store, str(GOLDEN / "approvals.jsonl"))
        assert (await verify(store, grammar=session_grammar)).ok
        await append_forged(store)
        report = await verify(store, grammar=session_grammar)
    assert [(f.kind, f.rule, f.stream, f.seq) for f in report.faults] == [
        ("grammar", "after_end", SESSION, 24)
    ]


def test_the_audit_report_fails_its_grammar_row_and_only_that(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = golden_db(tmp_path / "forged.db", forge=True)
    page = tmp_path / "report.html"
    code, out, _ = cli(capsys, "replay", SESSION, "--db", db, "--html", str(page))
    assert code == 1 and "verdict: NOT PROVEN" in out
    html = page.read_text()
    assert 'class="check ok" data-check="chain"' in html
    assert 'class="check fail" data-check="grammar"' in html and "after_end" in html
