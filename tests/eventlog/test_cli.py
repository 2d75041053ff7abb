"""``skillog log ...`` through orchestrator.cli.main, on real database files."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
import trio

from eventlog import NewEvent, open_sqlite_store
from orchestrator.cli import main


def make_db(path: Path) -> None:
    async def fill() -> None:
        async with open_sqlite_store(path) as store:
            digest = await store.put_blob(b"skill body")
            body = b'{"blob":"%s","n":1}' % digest.encode()
            await store.append(
                "sess-1", [NewEvent(type="a.b", body=body, recorded_at=10**18)], expected_seq=0
            )
            await store.append(
                "sess-2",
                [NewEvent(type="a.c", body=b"\x00raw", recorded_at=10**18 + 1)],
                expected_seq=0,
            )
            await store.append(
                "sess-1",
                [NewEvent(type="a.b@2", body=b'{"n":2}', recorded_at=10**18 + 2)],
                expected_seq=1,
            )

    trio.run(fill)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["log", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_sessions_show_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "x.db")
    make_db(tmp_path / "x.db")
    code, out, _ = cli(capsys, "sessions", "--db", db)
    assert code == 0 and out.splitlines()[0].startswith("sess-1\t2 events\t2001-09-09T01:46:40")
    code, out, _ = cli(capsys, "show", "sess-1", "--db", db)
    assert code == 0 and "#1 " in out and "a.b@2" in out and '{"n":2}' in out
    code, out, _ = cli(capsys, "show", "sess-2", "--db", db)
    assert "not JSON" in out
    code, out, _ = cli(capsys, "show", "sess-1", "--json", "--db", db)
    lines = [json.loads(line) for line in out.splitlines()]
    assert [x["seq"] for x in lines] == [0, 1] and lines[1]["body"] == {"n": 2}
    assert cli(capsys, "verify", "--db", db)[:2] == (
        0,
        "ok: 2 streams, 3 events, 1 blobs intact\n",
    )


def test_env_var_names_the_default_db(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_db(tmp_path / "env.db")
    monkeypatch.setenv("SKILLOG_DB", str(tmp_path / "env.db"))
    assert cli(capsys, "verify")[0] == 0


@pytest.mark.parametrize(
    ("tamper", "fault"),
    [
        (
            "UPDATE events SET body = x'7b7d' WHERE stream = 'sess-1' AND seq = 1",
            "FAULT stream 'sess-1' seq 1: modified",
        ),
        (
            "UPDATE blobs SET data = CAST('skill b0dy' AS BLOB)",
            f"FAULT blob {hashlib.sha256(b'skill body').hexdigest()}: blob_modified: its 10 bytes",
        ),
    ],
)
def test_verify_exit_1_names_where_and_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper: str, fault: str
) -> None:
    db = tmp_path / "x.db"
    make_db(db)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(tamper)
    conn.close()
    code, out, _ = cli(capsys, "verify", "--db", str(db))
    assert code == 1 and out.startswith(fault)


def test_checkpoint_chain_catches_truncation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, key, cps = tmp_path / "x.db", tmp_path / "k.pem", tmp_path / "cp.jsonl"
    make_db(db)
    assert cli(capsys, "keygen", "--out", str(key))[0] == 0
    assert (key.stat().st_mode & 0o777) == 0o600
    assert cli(capsys, "keygen", "--out", str(key))[0] == 2  # never overwrites
    for _ in range(2):
        assert (
            cli(capsys, "checkpoint", "--db", str(db), "--key", str(key), "--out", str(cps))[0] == 0
        )
    assert len(cps.read_text().splitlines()) == 2
    args = ["verify", "--db", str(db), "--checkpoint", str(cps), "--key", f"{key}.pub"]
    code, out, _ = cli(capsys, *args)
    assert code == 0 and "2 signed checkpoint(s)" in out
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM events WHERE stream = 'sess-1' AND seq = 1")
    conn.close()
    assert cli(capsys, "verify", "--db", str(db))[0] == 0
    code, out, _ = cli(capsys, *args)
    assert code == 1 and "sess-1' seq 1: truncated" in out
    cps.write_text(cps.read_text().replace('"seq":1', '"seq":5'))
    code, out, _ = cli(capsys, *args)
    assert code == 1 and "signature does not verify" in out


def test_verify_trusts_only_keys_the_auditor_chose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, cps = tmp_path / "x.db", tmp_path / "cp.jsonl"
    mine, attacker = tmp_path / "mine.pem", tmp_path / "attacker.pem"
    make_db(db)
    for key in (mine, attacker):
        assert cli(capsys, "keygen", "--out", str(key))[0] == 0
    sign = ["checkpoint", "--db", str(db), "--key", str(attacker), "--out", str(cps)]
    assert cli(capsys, *sign)[0] == 0
    base = ["verify", "--db", str(db), "--checkpoint", str(cps)]
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "no-config.yaml"))
    code, _, err = cli(capsys, *base)
    assert code == 2 and "no trusted key; pass --key FILE" in err
    code, out, _ = cli(capsys, *base, "--key", f"{mine}.pub")
    assert code == 1 and "not among the 1 trusted key(s)" in out
    code, out, _ = cli(capsys, *base, "--tofu")
    assert code == 0 and out.startswith("NOTE: trusted on first use (--tofu)")
    # A trusted-keys file (hex keys, comments), from --key, $SKILLOG_TRUSTED_KEYS, config.
    attacker_hex = json.loads(cps.read_text())["key"]
    trusted = tmp_path / "trusted-keys"
    trusted.write_text(f"# auditors' keys\n{'ab' * 32}  old key\n{attacker_hex} ci signer\n")
    code, out, _ = cli(capsys, *base, "--key", str(trusted))
    assert code == 0 and "NOTE" not in out
    monkeypatch.setenv("SKILLOG_TRUSTED_KEYS", str(trusted))
    assert cli(capsys, *base)[0] == 0
    monkeypatch.delenv("SKILLOG_TRUSTED_KEYS")
    config = tmp_path / "config.yaml"
    config.write_text("log:\n  trusted_keys: trusted-keys\n")
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    assert cli(capsys, *base)[0] == 0
    trusted.write_text("not-a-key\n")
    code, _, err = cli(capsys, *base)
    assert code == 2 and "trusted-keys:1: 'not-a-key' is not a 64-hex-digit" in err


def test_checkpoint_refuses_to_sign_a_log_that_went_backwards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, key, cps = tmp_path / "x.db", tmp_path / "k.pem", tmp_path / "cp.jsonl"
    sign = ["checkpoint", "--db", str(db), "--key", str(key), "--out", str(cps)]
    assert cli(capsys, "keygen", "--out", str(key))[0] == 0
    for tamper, why in [
        ("DELETE FROM events WHERE stream = 'sess-1' AND seq = 1", "seq 1: truncated"),
        ("UPDATE events SET hash = '%s' WHERE stream = 'sess-2'" % ("e" * 64), "seq 0: "),
        ("DELETE FROM events WHERE stream = 'sess-2'", "'sess-2': stream_missing"),
    ]:
        db.unlink(missing_ok=True)
        cps.unlink(missing_ok=True)
        make_db(db)
        assert cli(capsys, *sign)[0] == 0
        conn = sqlite3.connect(db)
        with conn:
            conn.execute(tamper)
        conn.close()
        code, _, err = cli(capsys, *sign)
        assert code == 2 and "refusing to sign: the log is not an extension" in err, err
        assert why in err
        assert len(cps.read_text().splitlines()) == 1  # nothing signed


def test_export_import_round_trip_is_byte_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    make_db(a)
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    assert cli(capsys, "export", "--db", str(a), "--out", str(first))[0] == 0
    code, out, _ = cli(capsys, "import", str(first), "--db", str(b))
    assert code == 0 and out == "imported 3 events in 2 streams (1 blobs)\n"
    assert cli(capsys, "export", "--db", str(b), "--out", str(second))[0] == 0
    assert first.read_bytes() == second.read_bytes()
    assert cli(capsys, "verify", "--db", str(b))[0] == 0
    code, out, _ = cli(capsys, "export", "sess-2", "--db", str(b))
    assert code == 0 and len(out.splitlines()) == 3 and '"body_b64"' in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "--db", "{tmp}/missing.db"], "no such file"),
        (["verify", "--db", "{tmp}/garbage.db"], "not a SQLite database"),
        (["show", "nope", "--db", "{tmp}/x.db"], "no session 'nope'"),
        (["export", "nope", "--db", "{tmp}/x.db"], "no stream 'nope'"),
        (["import", "{tmp}/missing.jsonl", "--db", "{tmp}/x.db"], "cannot read"),
        (
            ["verify", "--checkpoint", "{tmp}/garbage.db", "--db", "{tmp}/x.db"],
            ":1: not a checkpoint",
        ),
        (
            ["checkpoint", "--key", "{tmp}/garbage.db", "--out", "{tmp}/c", "--db", "{tmp}/x.db"],
            "not an unencrypted PEM private key",
        ),
    ],
)
def test_unusable_input_exits_2_with_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    make_db(tmp_path / "x.db")
    (tmp_path / "garbage.db").write_text("garbage\n")
    code, _, err = cli(capsys, *[a.format(tmp=tmp_path) for a in args])
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_a_truncated_import_commits_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    make_db(a)
    dump = tmp_path / "1.jsonl"
    cli(capsys, "export", "--db", str(a), "--out", str(dump))
    data = dump.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) - 30])
    code, _, err = cli(capsys, "import", str(cut), "--db", str(b))
    assert code == 2 and "cut.jsonl:4:" in err and "nothing was imported" in err
    lines = data.splitlines(keepends=True)
    cut.write_bytes(b"".join(lines[:-1]))  # cut after a whole line: no end line
    code, out, err = cli(capsys, "import", str(cut), "--db", str(b))
    assert code == 2 and out == "" and "cut.jsonl:4: the file is cut (truncated)" in err
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_bytes(b"".join([lines[0], lines[1], lines[2].replace(b'"seq":0', b'"seq":7')]))
    code, _, err = cli(capsys, "import", str(garbled), "--db", str(b))
    assert code == 2 and "garbled.jsonl:3:" in err
    legacy = tmp_path / "legacy.jsonl"  # an export from before the header and end lines
    legacy.write_bytes(b"".join(lines[1:-2]))
    code, out, err = cli(capsys, "import", str(legacy), "--db", str(tmp_path / "c.db"))
    assert code == 0 and out == "imported 2 events in 2 streams (1 blobs)\n"
    assert "warning: " in err and "a cut after a whole line cannot be ruled out" in err
    assert cli(capsys, "import", str(dump), "--db", str(tmp_path / "d.db"))[1:] == (
        "imported 3 events in 2 streams (1 blobs)\n",
        "",
    )
    code, out, _ = cli(capsys, "sessions", "--db", str(b))
    assert code == 0 and out == ""


# Rows written by hand that no chain can hold: each is invisible to every reader and a
# fault for verify, with where it is (issue 14, hole 1).
HAND_WRITTEN = [
    ("'sess-1', -1", "stream 'sess-1' seq -1 position 4: stray: seq -1 is not"),
    ("'sess-9', 'zero'", "stream 'sess-9' position 4: stray: seq 'zero' is not"),
    ("'sess-1', 0.5", "stream 'sess-1' position 4: stray: seq 0.5 is not"),
    ("x'00ff', 0", r"""stream "b'\\x00\\xff'" seq 0 position 4: stray: stream b'\x00\xff' is"""),
    ("'a' || char(10) || 'b', 0", "stream 'a\\nb' seq 0 position 4: stray: stream 'a\\nb' is"),
    ("'', 0", "stream '' seq 0 position 4: stray: stream '' is not a stream id"),
]


@pytest.mark.parametrize(("values", "fault"), HAND_WRITTEN)
def test_a_hand_written_row_outside_the_chains_is_shown_nowhere_and_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], values: str, fault: str
) -> None:
    db = tmp_path / "x.db"
    make_db(db)
    shown = {cmd: cli(capsys, cmd, "--db", str(db)) for cmd in ("sessions", "export")}
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO events (stream, seq, type, recorded_at, body, prev_hash, hash) "
            f"VALUES ({values}, 'forged', 1, x'7b7d', '{'0' * 64}', '{'0' * 64}')"
        )
    conn.close()
    for cmd, before in shown.items():
        assert cli(capsys, cmd, "--db", str(db)) == before
    code, out, _ = cli(capsys, "show", "sess-1", "--db", str(db))
    assert code == 0 and "forged" not in out
    code, out, _ = cli(capsys, "verify", "--db", str(db))
    assert code == 1 and out.startswith(f"FAULT {fault}"), out


def test_a_duplicate_seq_in_a_table_without_its_key_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.db"
    make_db(db)
    conn = sqlite3.connect(db)
    with conn:  # rebuild the table without UNIQUE (stream, seq), then copy a row
        conn.execute("DROP VIEW log_events")
        conn.execute("CREATE TABLE e2 AS SELECT * FROM events")
        conn.execute("DROP TABLE events")
        conn.execute("ALTER TABLE e2 RENAME TO events")
        conn.execute(
            "INSERT INTO events SELECT 9, stream, seq, type, recorded_at, body, prev_hash, hash "
            "FROM events WHERE stream = 'sess-1' AND seq = 0"
        )
    conn.close()
    code, out, _ = cli(capsys, "verify", "--db", str(db))
    assert code == 1 and out.startswith("FAULT stream 'sess-1' seq 0: duplicate:"), out


def test_verify_lists_every_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "x.db"
    make_db(db)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE events SET body = x'00' WHERE stream = 'sess-1' AND seq = 1")
        conn.execute("UPDATE events SET type = 'z' WHERE stream = 'sess-2'")
        for seq in (-1, -2):
            conn.execute(
                "INSERT INTO events (stream, seq, type, recorded_at, body, prev_hash, hash) "
                f"VALUES ('sess-1', {seq}, 't', 1, x'', '{'0' * 64}', '{'0' * 64}')"
            )
    conn.close()
    code, out, _ = cli(capsys, "verify", "--db", str(db))
    assert code == 1
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "FAULT stream 'sess-1' seq 1",
        "FAULT stream 'sess-2' seq 0",
        "FAULT stream 'sess-1' seq -1 position 4",
        "FAULT stream 'sess-1' seq -2 position 5",
    ]
