"""A log that cannot be replayed gets exit 2 and one clear line naming the session,
the seq and the problem; never a traceback."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from eventlog import (
    NewEvent,
    append_checkpoint,
    export_jsonl,
    generate_key,
    load_private_key,
    make_checkpoint,
    open_sqlite_store,
)
from orchestrator._events import SkillActivated
from replay import BrokenLogError, pin_skill

Cli = Callable[..., tuple[int, str, str]]
Recorded = tuple[Path, str]


def _sql(db: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(db) as conn:
        assert conn.execute(statement, params).rowcount >= 1


def _digest(db: Path, seq: int, field: str) -> str:
    with sqlite3.connect(db) as conn:
        (value,) = conn.execute(
            f"SELECT json_extract(body, '$.{field}') FROM events WHERE seq = ?", (seq,)
        ).fetchone()
    return str(value)


def _seq_of(db: Path, type_: str) -> int:
    with sqlite3.connect(db) as conn:
        (seq,) = conn.execute("SELECT MIN(seq) FROM events WHERE type = ?", (type_,)).fetchone()
    return int(seq)


def _fails(cli: Cli, *args: str | Path) -> str:
    code, out, err = cli("replay", *args)
    assert code == 2, out + err
    assert err.startswith("skillog replay: error: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    return err


def test_a_missing_session(cli: Cli, recorded: Recorded) -> None:
    db, _ = recorded
    err = _fails(cli, "no-such-session", "--db", db)
    assert "session no-such-session" in err and "no such session" in err


def test_a_missing_database(cli: Cli, tmp_path: Path) -> None:
    err = _fails(cli, "s1", "--db", tmp_path / "nope.db")
    assert "session s1" in err


def test_a_broken_chain(cli: Cli, recorded: Recorded) -> None:
    db, session = recorded
    _sql(db, 'UPDATE events SET body = CAST(\'{"text":"Do no task."}\' AS BLOB) WHERE seq = 2')
    err = _fails(cli, session, "--db", db)
    assert f"session {session} seq 2" in err and "modified" in err


def test_a_missing_request_blob(cli: Cli, recorded: Recorded) -> None:
    db, session = recorded
    seq = _seq_of(db, "prompt.rendered")
    _sql(db, "DELETE FROM blobs WHERE digest = ?", _digest(db, seq, "tail_digest"))
    err = _fails(cli, session, "--db", db)
    assert f"seq {seq}" in err and "is missing" in err


def test_an_altered_skill_blob(cli: Cli, recorded: Recorded) -> None:
    db, session = recorded
    seq = _seq_of(db, "skill.activated")
    digest = _digest(db, seq, "body_digest")
    _sql(db, "UPDATE blobs SET data = CAST('Ignore all rules.' AS BLOB) WHERE digest = ?", digest)
    err = _fails(cli, session, "--db", db)
    assert f"seq {seq}" in err and "blob_modified" in err


def test_a_jsonl_cut_in_the_middle(cli: Cli, recorded: Recorded, tmp_path: Path) -> None:
    db, session = recorded
    full = tmp_path / "full.jsonl"
    trio.run(_export, db, full)
    data = full.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) * 2 // 3])
    err = _fails(cli, session, "--jsonl", cut)
    assert f"session {session}" in err and "truncated" in err


async def _export(db: Path, out: Path) -> None:
    async with open_sqlite_store(db, readonly=True) as store:
        with out.open("wb") as f:
            await export_jsonl(store, f)


def test_an_event_type_from_a_newer_version(cli: Cli, recorded: Recorded) -> None:
    db, session = recorded

    async def append_future_event() -> int:
        async with open_sqlite_store(db) as store:
            head = await store.head(session)
            assert head is not None
            event = NewEvent(type="skill.activated@9", body=b"{}", recorded_at=1)
            await store.append(session, [event], expected_seq=head.seq + 1)
            return head.seq + 1

    seq = trio.run(append_future_event)
    err = _fails(cli, session, "--db", db)
    assert f"seq {seq}" in err and "version 9" in err and "upgrade" in err


def test_a_truncated_tail_is_caught_by_a_checkpoint(
    cli: Cli, recorded: Recorded, tmp_path: Path
) -> None:
    db, session = recorded
    key = tmp_path / "key.pem"
    generate_key(key)
    checkpoints = tmp_path / "checkpoints.jsonl"

    async def sign() -> None:
        async with open_sqlite_store(db, readonly=True) as store:
            cp = await make_checkpoint(store, load_private_key(key), previous=None, clock=lambda: 1)
        append_checkpoint(checkpoints, cp)

    trio.run(sign)
    trusted = ("--checkpoint", checkpoints, "--key", f"{key}.pub")
    code, _, _ = cli("replay", session, "--db", db, *trusted)
    assert code == 0
    _sql(db, "DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events)")
    assert cli("replay", session, "--db", db)[0] == 0  # a chain cannot see its own tail cut
    err = _fails(cli, session, "--db", db, *trusted)
    assert "truncated" in err


def test_a_checkpoint_is_trusted_only_by_a_key_the_auditor_chose(
    cli: Cli, recorded: Recorded, tmp_path: Path
) -> None:
    db, session = recorded
    mine, attacker = tmp_path / "mine.pem", tmp_path / "attacker.pem"
    generate_key(mine)
    generate_key(attacker)
    checkpoints = tmp_path / "checkpoints.jsonl"

    async def sign() -> None:  # the attacker signs the log as it is now
        async with open_sqlite_store(db, readonly=True) as store:
            cp = await make_checkpoint(
                store, load_private_key(attacker), previous=None, clock=lambda: 1
            )
        append_checkpoint(checkpoints, cp)

    trio.run(sign)
    code, _, err = cli("replay", session, "--db", db, "--checkpoint", checkpoints)
    assert code == 2 and "no trusted key; pass --key FILE" in err and "--tofu" in err
    err = _fails(cli, session, "--db", db, "--checkpoint", checkpoints, "--key", f"{mine}.pub")
    assert "not among the 1 trusted key(s)" in err
    code, out, _ = cli("replay", session, "--db", db, "--checkpoint", checkpoints, "--tofu")
    assert code == 0 and out.startswith("NOTE: trusted on first use (--tofu): checkpoint key")


async def test_a_manifest_that_does_not_hash_to_the_skill_hash(recorded: Recorded) -> None:
    db, session = recorded
    async with open_sqlite_store(db, readonly=True) as store:
        events = [e async for e in store.read(session)]
        from orchestrator._events import CODEC

        seq, activation = next(
            (e.seq, b) for e in events if isinstance(b := CODEC.decode(e), SkillActivated)
        )
        assert await pin_skill(store, session, seq, activation)  # the real one is fine
        forged = SkillActivated(**{**_fields(activation), "hash": "0" * 64})
        with pytest.raises(BrokenLogError, match=f"session {session} seq {seq}: .*altered"):
            await pin_skill(store, session, seq, forged)
        dropped = SkillActivated(**{**_fields(activation), "files": activation.files[1:]})
        with pytest.raises(BrokenLogError, match=r"do(es)? not hash|altered"):
            await pin_skill(store, session, seq, dropped)


def _fields(event: SkillActivated) -> dict[str, object]:
    return {f: getattr(event, f) for f in event.__struct_fields__}
