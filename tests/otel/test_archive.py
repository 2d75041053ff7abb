"""``skillog otel export --archive``: the traces of archived sessions, exported after
the fact, are the spans the live log gave before archiving (same ids, same
timestamps, same content), sent to a real OTLP/HTTP receiver; an archive that does
not verify (tampered, signed by another key, no trusted key) sends nothing (exit 2)."""

from __future__ import annotations

import json
import time
from typing import Any

from ..orchestrator.test_cli_archive import Cli, now
from ..orchestrator.test_cli_archive import cli as cli  # the fixture: a skill, a model script


def spans(receiver: Any) -> list[bytes]:
    found = sorted(s.SerializeToString(deterministic=True) for s in receiver.spans)
    receiver.requests.clear()
    return found


def test_archived_sessions_export_the_same_spans_as_before(cli: Cli, receiver: Any) -> None:
    done = cli.run("--approve")
    suspended = cli.run()
    live = ("otel", "export", done, "--content", "--endpoint", receiver.url)
    code, out, err = cli(*live)
    assert code == 0, out + err
    before = spans(receiver)
    assert len(before) > 3
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    cli("log", "keygen", "--out", cli.tmp / "other.pem", db=False)
    time.sleep(0.01)
    code, out, err = cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "a.jsonl")
    assert code == 0 and out.startswith("archived 1 sessions"), err
    assert "removed 0 blobs" not in out  # the content below comes from the archive
    attempts = receiver.attempts
    code, out, err = cli(*live)
    assert code == 2 and receiver.attempts == attempts  # gone from the live log
    archived = ("otel", "export", "--endpoint", receiver.url, "--archive", "a.jsonl")
    code, out, err = cli(*archived, done, "--content", "--key", "k.pem.pub", db=False)
    assert code == 0, out + err
    assert f"exported 1 sessions ({len(before)} spans)" in out
    assert spans(receiver) == before
    # --all: every ended session in the archive (the suspended one was never archived).
    code, out, err = cli(*archived, "--all", "--tofu", "--state", "s2.json", db=False)
    assert code == 0 and "exported 1 sessions" in out, err
    assert len(spans(receiver)) == len(before)
    assert suspended not in out


def test_an_archive_that_does_not_verify_sends_nothing(cli: Cli, receiver: Any) -> None:
    done = cli.run("--approve")
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    cli("log", "keygen", "--out", cli.tmp / "other.pem", db=False)
    time.sleep(0.01)
    assert cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "a.jsonl")[0] == 0
    archive = cli.tmp / "a.jsonl"
    base = ("otel", "export", done, "--endpoint", receiver.url, "--archive")
    code, _, err = cli(*base, archive, db=False)
    assert code == 2 and "no trusted key" in err and "--key" in err
    code, _, err = cli(*base, archive, "--key", "other.pem.pub", db=False)
    assert code == 2 and "does not verify" in err
    code, _, err = cli("otel", "export", done, "--endpoint", receiver.url, "--key", "k.pem.pub")
    assert code == 2 and "--key and --tofu are for --archive" in err
    lines = archive.read_bytes().splitlines(keepends=True)
    tampered = cli.tmp / "tampered.jsonl"
    line = json.loads(lines[2])
    line["recorded_at"] = line.get("recorded_at", 0) + 1
    tampered.write_bytes(b"".join([*lines[:2], json.dumps(line).encode() + b"\n", *lines[3:]]))
    code, _, err = cli(*base, tampered, "--key", "k.pem.pub", db=False)
    assert code == 2 and "tampered.jsonl" in err
    truncated = cli.tmp / "truncated.jsonl"
    truncated.write_bytes(b"".join(lines[:-1]))
    code, _, err = cli(*base, truncated, "--key", "k.pem.pub", db=False)
    assert code == 2 and "truncated.jsonl" in err
    assert receiver.attempts == 0
