"""``skillog log archive`` and ``replay --archive`` as an operator and an auditor type
them: only ended sessions go, the live log still verifies (chains, grammar, catalog,
checkpoints), the archive proves each archived session byte for byte, and bad input
(a wrong date, a tampered archive, an archive given as the log) is a clear exit 2."""

from __future__ import annotations

import datetime
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gated
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from eventlog import (
    MAINTENANCE_STREAM,
    EventStore,
    archive_streams,
    load_archive,
    open_store,
)
from orchestrator import Agent, verdict
from orchestrator._catalog import SESSIONS, ended_before
from orchestrator._fleet import acquire, release
from orchestrator._grammar import session_grammar
from orchestrator._streams import is_session_stream
from orchestrator.adapters import ScriptedModel
from orchestrator.cli import main

from .test_cli_sessions import SKILL, TURNS


class Cli:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp, self.capsys = tmp_path, capsys
        self.db: str | Path = tmp_path / "log.db"

    def __call__(self, *args: str | Path, db: bool = True) -> tuple[int, str, str]:
        more = ("--db", self.db) if db else ()
        code = main([str(a) for a in (*args, *more)])
        out, err = self.capsys.readouterr()
        return code, out, err

    def model(self) -> str:
        return f"scripted:{self.tmp / 'turns.yaml'}"

    def run(self, *more: str) -> str:
        code, out, err = self(
            "run", "greet me", "--model", self.model(),
            "--skills", self.tmp / "skills" / "greet", "--project", self.tmp, *more,
        )  # fmt: skip
        assert code in (0, 1), out + err
        return str(self.rows()[0]["session"])

    def rows(self, *more: str) -> list[dict[str, object]]:
        code, out, _ = self("sessions", "--json", "--all", *more)
        assert code == 0
        return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    skill = tmp_path / "skills" / "greet"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    (skill / "scripts" / "hi.py").write_text("print('hi')\n")
    (tmp_path / "turns.yaml").write_text(TURNS)
    return Cli(tmp_path, capsys)


def now() -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=-0.001)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sessions_of(cli: Cli) -> tuple[str, str, str, str]:
    """One session of each kind: ended twice, suspended, queued (never run)."""
    done = cli.run("--approve")
    capped = cli.run("--approve", "--max-turns", "1")
    suspended = cli.run()  # nobody to ask: it suspends awaiting approval
    code, _, err = cli("submit", "queued task", "--model", cli.model())
    assert code == 0, err
    known = (done, capped, suspended)
    queued = next(str(r["session"]) for r in cli.rows() if r["session"] not in known)
    return done, capped, suspended, queued


def test_only_ended_sessions_are_archived_and_both_sides_prove_themselves(cli: Cli) -> None:
    done, capped, suspended, queued = sessions_of(cli)
    assert cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)[0] == 0
    assert cli("log", "checkpoint", "--key", cli.tmp / "k.pem", "--out", cli.tmp / "cp")[0] == 0
    time.sleep(0.01)
    before = now()
    code, out, err = cli("log", "archive", "--before", before, "--key", "k.pem", "--out", "a.jsonl")
    assert code == 0, err
    assert out.startswith("archived 2 sessions") and "log file" in out
    # Listings leave archived sessions out; the running and suspended ones stay.
    assert {r["session"] for r in cli.rows()} == {suspended, queued}
    code, out, err = cli("log", "verify", "--checkpoint", "cp", "--key", "k.pem.pub")
    assert code == 0, out + err
    assert cli("log", "reindex")[0] == 0
    assert cli("log", "verify")[0] == 0
    # A checkpoint after the archive extends the one before (tombstoned heads signed).
    code, out, err = cli("log", "checkpoint", "--key", "k.pem", "--out", "cp")
    assert code == 0, err
    assert cli("log", "verify", "--checkpoint", "cp", "--key", "k.pem.pub")[0] == 0
    # The auditor proves an archived session from the archive, against the live log.
    for session in (done, capped):
        code, out, err = cli("replay", session, "--archive", "a.jsonl", "--key", "k.pem.pub")
        assert code == 0, out + err
        assert "archive chain and signed checkpoint verified" in out
        assert "every request reproduced byte for byte" in out
    code, out, err = cli("replay", done, "--archive", "a.jsonl", "--key", "k.pem.pub", "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    # Archiving again: nothing else has ended; the same --out is already done.
    code, out, _ = cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "b.jsonl")
    assert code == 0 and "nothing archived" in out and not (cli.tmp / "b.jsonl").exists()
    code, out, _ = cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "a.jsonl")
    assert code == 0 and "already archived" in out
    # The live log says where an archived session went, and will not take it back.
    code, _, err = cli("replay", done)
    assert code == 2 and "archived from this log" in err and "--archive FILE" in err
    code, _, err = cli("log", "import", "a.jsonl")
    assert code == 2 and "was archived from this log" in err
    # The archive is an export too: it imports into a fresh log, which verifies.
    cli.db = cli.tmp / "restored.db"
    assert cli("log", "import", "a.jsonl")[0] == 0
    assert {r["session"] for r in cli.rows()} == {done, capped}


def test_replay_archive_finds_a_tampered_or_mismatched_archive(cli: Cli) -> None:
    done = cli.run("--approve")
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    time.sleep(0.01)
    assert cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "a.jsonl")[0] == 0
    lines = (cli.tmp / "a.jsonl").read_bytes().splitlines(keepends=True)
    assert any(b"greet me" in line for line in lines)
    (cli.tmp / "edited.jsonl").write_bytes(
        b"".join(line.replace(b"greet me", b"greet ME") for line in lines)
    )
    code, _, err = cli("replay", done, "--archive", "edited.jsonl", "--key", "k.pem.pub")
    assert code == 2 and "hash does not match the content (altered line)" in err
    # Re-signed with another key: the signature is the auditor's key's or nothing.
    cli("log", "keygen", "--out", cli.tmp / "other.pem", db=False)
    code, _, err = cli("replay", done, "--archive", "a.jsonl", "--key", "other.pem.pub")
    assert code == 2 and "not among the 1 trusted key" in err
    code, _, err = cli("replay", done, "--archive", "a.jsonl")
    assert code == 2 and "no trusted key" in err
    # The tombstone names the archive's checkpoint: an edited tombstone is found by
    # verify, and a replay against the live log says the two disagree.
    with sqlite3.connect(cli.tmp / "log.db") as conn:
        conn.execute("UPDATE eventlog_tombstones SET length = length - 1")
    code, out, _ = cli("log", "verify")
    assert code == 1 and "FAULT" in out and "tombstone" in out
    code, _, err = cli("replay", done, "--archive", "a.jsonl", "--key", "k.pem.pub")
    assert code == 2 and "does not match the live log's tombstone" in err


def test_bad_input_is_a_clear_exit_2(cli: Cli) -> None:
    cli.run("--approve")
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    for date, says in [
        ("2026-13-01", "not a date or time; write YYYY-MM-DD"),
        ("yesterday", "not a date or time"),
        ("2026-01-31T12:00:00", "needs its offset"),
        ("2999-01-01", "is in the future"),
    ]:
        code, _, err = cli("log", "archive", "--before", date, "--key", "k.pem")
        assert code == 2 and says in err and "Traceback" not in err, err
    time.sleep(0.01)
    assert cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "a.jsonl")[0] == 0
    # An archive given as the log to archive: refused as what it is, not a database.
    cli.db = cli.tmp / "a.jsonl"
    code, _, err = cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "b.jsonl")
    assert code == 2 and "Traceback" not in err and "a.jsonl" in err
    # An export (no signed checkpoint) given as an archive.
    cli.db = cli.tmp / "log.db"
    cli("log", "export", "--out", "plain.jsonl")
    code, _, err = cli("replay", "x", "--archive", "plain.jsonl", "--key", "k.pem.pub")
    assert code == 2 and "not an archive" in err


def test_postgres_archive_round_trip(cli: Cli, pg_dsn: str) -> None:
    cli.db = pg_dsn
    done = cli.run("--approve")
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    time.sleep(0.01)
    code, out, err = cli("log", "archive", "--before", now(), "--key", "k.pem", "--out", "a.jsonl")
    assert code == 0 and out.startswith("archived 1 sessions"), err
    assert cli.rows() == []
    assert cli("log", "verify")[0] == 0
    code, out, err = cli("replay", done, "--archive", "a.jsonl", "--key", "k.pem.pub")
    assert code == 0, out + err


def blob_digests(db: str | Path) -> set[str]:
    if isinstance(db, str) and db.startswith("postgres"):
        import psycopg

        with psycopg.connect(db) as conn:
            return {r[0] for r in conn.execute("SELECT digest FROM blobs")}
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT digest FROM blobs")}


def named(db: str | Path) -> set[str]:
    """Every digest an event left in the log names (the reference scan, done here with
    the verifier's own per-type readers, which are precise)."""
    from orchestrator import blob_references

    async def scan() -> set[str]:
        found: set[str] = set()
        async with open_store(str(db)) as store:
            async for e in store.read_all():
                reader = blob_references(e.type)
                found.update(reader(e.body) if reader else ())
        return found

    return trio.run(scan)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_archive_removes_the_blobs_only_archived_sessions_named(
    cli: Cli, store: str, request: pytest.FixtureRequest
) -> None:
    """The live log keeps every blob a live event names (the skill the suspended
    session shares with the archived ones) and drops the rest; the archive carries them,
    so the archived sessions replay from the file alone and the live log verifies."""
    if store == "postgres":
        cli.db = request.getfixturevalue("pg_dsn")
    done = cli.run("--approve")
    code, _, err = cli("run", "a different task", "--model", cli.model(), "--approve",
                       "--skills", cli.tmp / "skills" / "greet", "--project", cli.tmp)  # fmt: skip
    assert code in (0, 1), err
    other = next(str(r["session"]) for r in cli.rows() if r["session"] != done)
    time.sleep(0.01)
    cut = now()
    suspended = cli.run()
    before = blob_digests(cli.db)
    live_before = named(cli.db)
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    code, out, err = cli("log", "archive", "--before", cut, "--key", "k.pem", "--out", "a.jsonl")
    assert code == 0 and out.startswith("archived 2 sessions"), err
    after = blob_digests(cli.db)
    live = named(cli.db)
    assert live <= after  # nothing a live event names is gone
    assert live < live_before and before - after  # some blobs were only the archived ones'
    assert before - after == live_before - live  # exactly what no live event names now
    assert f"removed {len(before - after)} blobs" in out
    assert {r["session"] for r in cli.rows()} == {suspended}
    assert cli("log", "verify")[0] == 0
    for session in (done, other):
        code, text, err = cli("replay", session, "--archive", "a.jsonl", "--key", "k.pem.pub")
        assert code == 0 and "every request reproduced byte for byte" in text, text + err
    code, text, err = cli("replay", suspended)
    assert code == 0, text + err


CRASH = """
import os, signal, sys
import eventlog._archive as archive, eventlog._sqlite as sqlite, eventlog._sqlite_writer as writer
from orchestrator.cli import main

point = sys.argv[1]
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def wrap(owner, name, *, before=False, after=False, nth=0):
    original = getattr(owner, name)
    calls = [0]
    def patched(*a, **k):
        calls[0] += 1
        if before or calls[0] == nth:
            die()
        result = original(*a, **k)
        if after:
            die()
        return result
    async def apatched(*a, **k):
        calls[0] += 1
        if before or calls[0] == nth:
            die()
        result = await original(*a, **k)
        if after:
            die()
        return result
    import inspect
    setattr(owner, name, apatched if inspect.iscoroutinefunction(original) else patched)
if point == "before_file":
    wrap(archive, "write_archive", before=True)
elif point == "mid_file":
    wrap(archive, "line_with_blobs", nth=5)
elif point == "after_file":
    wrap(sqlite.SqliteStore, "commit_archive", before=True)
elif point == "in_commit":
    wrap(writer.Writer, "archive", after=True)  # in the transaction, before COMMIT
elif point == "after_commit":
    wrap(sqlite.SqliteStore, "commit_archive", after=True)
sys.exit(main(sys.argv[2:]))
"""
POINTS = ("before_file", "mid_file", "after_file", "in_commit", "after_commit")


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_mid_archive_leaves_the_file_and_tombstones_both_or_neither(
    cli: Cli, tmp_path: Path, point: str
) -> None:
    """A real ``skillog log archive`` process SIGKILLed at each point where it can die:
    a tombstone never exists without its complete archive file, the log verifies, and
    the same command run again finishes the archive."""
    for _ in range(3):
        cli.run("--approve")
    cli("log", "keygen", "--out", cli.tmp / "k.pem", db=False)
    time.sleep(0.01)
    before = now()
    out = tmp_path / "a.jsonl"
    args = ["log", "archive", "--db", str(cli.db), "--before", before,
            "--key", str(tmp_path / "k.pem"), "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, point, *args], env=env, capture_output=True, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with sqlite3.connect(cli.db) as conn:
        stones = conn.execute("SELECT count(*) FROM eventlog_tombstones").fetchone()[0]
    assert stones == (6 if point == "after_commit" else 0)  # 3 sessions, 3 lease streams
    assert out.exists() == (point in ("after_file", "in_commit", "after_commit"))
    temporaries = sorted(tmp_path.glob(".a.jsonl.*.tmp"))
    assert len(temporaries) == (1 if point == "mid_file" else 0)  # SIGKILL skips cleanup
    assert cli("log", "verify")[0] == 0
    code, text, err = cli("log", "archive", "--before", before, "--key", "k.pem", "--out", out)
    assert code == 0, err
    assert not list(tmp_path.glob(".a.jsonl.*.tmp"))
    for leftover in temporaries:
        assert f"removed {leftover}: a temporary file left by an interrupted archive run" in text
    done = "already archived" if point == "after_commit" else "archived 3 sessions"
    assert done in text
    assert cli.rows() == [] and cli("log", "verify")[0] == 0


async def test_a_leased_session_is_never_archived_even_once_ended(
    catalog_store: EventStore, tmp_path: Path
) -> None:
    """A driver that has not let go yet (its session ended, its lease still live) keeps
    the session out of the selection, and out of a commit chosen before it took it."""
    store = catalog_store
    agent = Agent(model=ScriptedModel([{"text": "done"}]), model_name="m")
    for sid in ("free", "held", "raced", "visited"):
        await agent.run(store, "a task", session_id=sid)
    await acquire(store, "held", "worker-1", ttl_ns=60 * 10**9)
    heads = await ended_before(store, time.time_ns())
    assert {h.stream for h in heads} == {"free", "raced", "visited"}  # no lease stream yet
    # Taken after the choice: only its catalog row says so (its session stream did not
    # move), and the commit reads the row under the same lock.
    await acquire(store, "raced", "worker-2", ttl_ns=60 * 10**9)
    # Taken and let go since: its new lease stream would be left without its session.
    lease = await acquire(store, "visited", "worker-3", ttl_ns=60 * 10**9)
    await release(store, lease, "ended", time.time_ns())
    result = await archive_streams(
        store, heads, out=tmp_path / "a.jsonl", key=Ed25519PrivateKey.generate(),
        by="test", before=time.time_ns(), clock=time.time_ns,
    )  # fmt: skip
    assert result.archived == ("free",) and result.skipped == ("raced", "visited")
    assert await store.head("held") is not None and await store.head("raced") is not None
    assert (await verdict(store)).ok


def test_archive_while_a_worker_runs_takes_only_what_ended(cli: Cli, tmp_path: Path) -> None:
    """A real ``skillog worker`` drives twelve queued sessions (each runs a script)
    while ``log archive`` runs again and again: every archive holds only sessions that
    had ended, each session is archived once, and the log verifies after every run
    (but for the catalog race noted below) and wholly once the worker is done."""
    # Each script runs until the test lets it end, a few before each archive run: some
    # archive runs while sessions remain, however slow the machine (a fixed one-second
    # script let all twelve end before the first archive under load).
    (tmp_path / "skills" / "greet" / "scripts" / "hi.py").write_text(gated.GATED_SCRIPT)
    ids = []
    for i in range(12):
        code, out, err = cli("submit", f"task {i}", "--model", cli.model(), "--tier", "org",
                             "--skills", tmp_path / "skills" / "greet")  # fmt: skip
        assert code == 0, err
        ids.append(out.strip())
    cli("log", "keygen", "--out", tmp_path / "k.pem", db=False)
    worker = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "worker", "--db", str(cli.db), "--skills",
         str(tmp_path / "skills" / "greet"), "--tier", "org", "--concurrency", "12",
         "--poll-ms", "50"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )  # fmt: skip
    archived: list[str] = []
    runs: list[int] = []  # sessions archived so far, after each run that wrote a file
    try:
        deadline = time.monotonic() + 90
        n = 0
        while len(archived) < len(ids) and time.monotonic() < deadline:
            n += 1
            let_some_end(worker.pid, cli.db, ids, deadline)
            code, out, err = cli("log", "archive", "--before", now(), "--key", "k.pem",
                                 "--out", f"a{n}.jsonl")  # fmt: skip
            assert code == 0, err
            # While the worker writes, verify's catalog check can see a row and then a
            # log that moved on (it reads them one after the other): only that may differ.
            _, out, err = cli("log", "verify", "--json")
            faults = json.loads(out)["faults"]
            assert all(f["kind"] == "catalog" for f in faults), out + err
            if not (tmp_path / f"a{n}.jsonl").exists():
                continue
            store, _ = trio.run(load_archive, tmp_path / f"a{n}.jsonl")
            stones = trio.run(_tombstoned, cli.db)
            for info in trio.run(store.streams):
                if info.stream in ids and info.stream in stones:
                    last = trio.run(_last_type, store, info.stream)
                    assert last == "session.ended", (info.stream, last)
                    assert info.stream not in archived
                    archived.append(info.stream)
            runs.append(len(archived))
    finally:
        gated.release(worker.pid, "hi.py")
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert sorted(archived) == sorted(ids)
    assert runs[0] < len(ids), f"every session ended before an archive ran: {runs}"
    assert cli.rows() == [] and cli("log", "verify")[0] == 0


def let_some_end(worker: int, db: str | Path, ids: list[str], deadline: float) -> None:
    """Let up to four of the gated scripts running under ``worker`` end, and wait until
    one more of sessions ``ids`` has ended."""
    done = len(ended(db, ids))
    if done == len(ids):
        return

    def more() -> bool:
        return len(ended(db, ids)) > done

    until(lambda: gated.release(worker, "hi.py", at_most=4) > 0 or more(), deadline, "a script")
    until(more, deadline, f"a session to end after {done}")


def until(condition: Callable[[], bool], deadline: float, what: str) -> None:
    while not condition():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.05)


def ended(db: str | Path, ids: list[str]) -> set[str]:
    """Which of sessions ``ids`` have ended, or were archived, in the log at ``db``."""

    async def read() -> set[str]:
        async with open_store(db, readonly=True) as store:
            streams = {info.stream for info in await store.streams()}
            done = set()
            for stream in ids:
                if stream not in streams or await _last_type(store, stream) == "session.ended":
                    done.add(stream)
            return done

    return trio.run(read)


async def _tombstoned(db: str | Path) -> set[str]:
    async with open_store(db, readonly=True) as store:
        return {t.stream for t in await store.tombstones()}  # type: ignore[attr-defined]


async def _last_type(store: EventStore, stream: str) -> str:
    return [e.type async for e in store.read(stream)][-1]


def test_the_maintenance_stream_holds_only_log_archived() -> None:
    grammar = session_grammar(MAINTENANCE_STREAM)
    assert grammar.check(0, "log.archived", b"{}") is None
    found = grammar.check(1, "session.started", b"{}")
    assert found is not None and found.rule == "wrong_stream"
    assert not is_session_stream(MAINTENANCE_STREAM) and SESSIONS.key(MAINTENANCE_STREAM) is None
