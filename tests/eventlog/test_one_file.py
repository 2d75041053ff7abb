"""One file is the whole log (issue 14, hole 4): the WAL is folded in on close, a live
log can be snapshotted to one file, read-only media open, failed opens leak nothing."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from eventlog import (
    DatabaseFormatError,
    DatabaseLockedError,
    NewEvent,
    StoreError,
    open_sqlite_store,
    verify,
)

SKILLOG = [sys.executable, "-m", "orchestrator.cli"]


def ev(i: int) -> NewEvent:
    return NewEvent(type="t", body=b'{"i":%d}' % i, recorded_at=i)


async def fill(db: Path, n: int = 50) -> None:
    async with open_sqlite_store(db) as store:
        for i in range(n):
            await store.append("s", [ev(i)], expected_seq=i, blobs=[b"blob %d" % i])


async def verify_copy(db: Path, tmp_path: Path) -> str:
    """Copy only ``db`` (no -wal, no -shm) elsewhere and verify it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(db, elsewhere / db.name)
    async with open_sqlite_store(elsewhere / db.name, readonly=True) as store:
        report = await verify(store)
    assert report.ok, report.fault
    return f"{report.events} events, {report.blobs} blobs"


async def test_closing_the_store_folds_the_wal_into_the_file(tmp_path: Path) -> None:
    db = tmp_path / "skillog.db"
    await fill(db)
    wal = tmp_path / "skillog.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert await verify_copy(db, tmp_path) == "50 events, 50 blobs"


def test_a_copied_skillog_db_verifies_after_a_demo_run(tmp_path: Path) -> None:
    run = subprocess.run(
        [*SKILLOG, "demo", "--db", "skillog.db"], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    copy = tmp_path / "auditor"
    copy.mkdir()
    shutil.copy(tmp_path / "skillog.db", copy / "skillog.db")
    for cmd in (["log", "verify"], ["log", "sessions"]):
        out = subprocess.run(
            [*SKILLOG, *cmd, "--db", str(copy / "skillog.db")], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1  # the demo's one session


HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_failed_opens_leak_no_file_descriptor(tmp_path: Path) -> None:
    not_sqlite = tmp_path / "text.db"
    not_sqlite.write_bytes(b"not a database\n" * 100)
    bad_body = tmp_path / "garbled.db"
    bad_body.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    newer = tmp_path / "newer.db"
    await fill(newer, 1)
    conn = sqlite3.connect(newer)
    with conn:
        conn.execute("UPDATE eventlog_meta SET value = '9' WHERE key = 'format_version'")
    conn.close()
    locked = tmp_path / "locked.db"
    await fill(locked, 1)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    # Another process holds the write lock (in this process, SQLite would rightly keep
    # a closed connection's descriptor until our own lock holder let go).
    holder = subprocess.Popen(  # noqa: ASYNC220 - a lock holder for the whole test
        [sys.executable, "-c", HOLD_LOCK, str(locked)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
    cases: list[tuple[Path, bool, type[Exception]]] = [
        (not_sqlite, False, DatabaseFormatError),
        (not_sqlite, True, DatabaseFormatError),
        (bad_body, False, DatabaseFormatError),
        (bad_body, True, DatabaseFormatError),
        (newer, False, DatabaseFormatError),
        (newer, True, DatabaseFormatError),
        (locked, False, DatabaseLockedError),
        (empty, True, DatabaseFormatError),
        (tmp_path / "absent.db", True, StoreError),
    ]
    try:
        before = open_fds()
        for path, readonly, error in cases:
            with pytest.raises(error):
                async with open_sqlite_store(path, readonly=readonly, busy_timeout=0.05):
                    pass
            assert open_fds() == before, (path.name, readonly)
    finally:
        holder.communicate(b"")


def _can_mount() -> bool:
    probe = ["unshare", "-m", "sh", "-c", "mount --bind / /mnt && mount -o remount,bind,ro /mnt"]
    try:
        return subprocess.run(probe, capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def on_read_only_media(src: Path, *commands: str) -> subprocess.CompletedProcess[str]:
    """Run shell ``commands`` with ``src`` bind-mounted read-only at /mnt, in a private
    mount namespace (root ignores file modes, a read-only mount it cannot)."""
    script = f"mount --bind {src} /mnt && mount -o remount,bind,ro /mnt && " + " && ".join(commands)
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)


@pytest.mark.skipif(not _can_mount(), reason="needs unshare -m and mount (root)")
def test_verify_show_export_and_replay_work_on_read_only_media(tmp_path: Path) -> None:
    run = subprocess.run(
        [*SKILLOG, "demo", "--db", "skillog.db"], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    session = run.stdout.split("skillog replay ")[1].split()[0]
    media = tmp_path / "media"
    media.mkdir()
    shutil.copy(tmp_path / "skillog.db", media / "skillog.db")
    cli = " ".join(SKILLOG)
    out = on_read_only_media(
        media,
        "touch /mnt/probe 2>/dev/null; test ! -e /mnt/probe",
        f"{cli} log verify --db /mnt/skillog.db",
        f"{cli} log show {session} --db /mnt/skillog.db > /dev/null",
        f"{cli} log export --db /mnt/skillog.db > /dev/null",
        f"{cli} replay {session} --db /mnt/skillog.db",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: 1 streams" in out.stdout and "reproduced byte for byte" in out.stdout
    assert sorted(p.name for p in media.iterdir()) == ["skillog.db"]


@pytest.mark.skipif(not _can_mount(), reason="needs unshare -m and mount (root)")
async def test_a_log_with_pending_commits_on_read_only_media_says_so(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    db = tmp_path / "skillog.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", [ev(0)], expected_seq=0)
        for name in ("skillog.db", "skillog.db-wal"):  # copied while open: WAL not folded
            shutil.copy(tmp_path / name, media / name)
    out = on_read_only_media(media, f"{' '.join(SKILLOG)} log verify --db /mnt/skillog.db")
    assert out.returncode == 2
    assert "skillog.db-wal holds commits the main file lacks" in out.stderr, out.stderr


async def test_a_read_only_open_never_changes_the_file(tmp_path: Path) -> None:
    db = tmp_path / "skillog.db"
    await fill(db, 5)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    async with open_sqlite_store(db, readonly=True) as store:
        assert (await verify(store)).ok
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


async def test_snapshot_copies_a_live_log_into_one_file(tmp_path: Path) -> None:
    db, out = tmp_path / "skillog.db", tmp_path / "copy" / "audit.db"
    out.parent.mkdir()
    async with open_sqlite_store(db) as store:
        for i in range(20):
            await store.append("s", [ev(i)], expected_seq=i, blobs=[b"b%d" % i])
        assert (tmp_path / "skillog.db-wal").stat().st_size > 0  # the log is live
        snap = await trio.run_process(
            [*SKILLOG, "log", "snapshot", str(out), "--db", str(db)], capture_stdout=True
        )
        assert b"one file" in snap.stdout
        await store.append("s", [ev(20)], expected_seq=20)  # after the snapshot
    assert sorted(p.name for p in out.parent.iterdir()) == ["audit.db"]
    assert await verify_copy(out, tmp_path) == "20 events, 20 blobs"
    again = await trio.run_process(
        [*SKILLOG, "log", "snapshot", str(out), "--db", str(db)], capture_stderr=True, check=False
    )
    assert again.returncode == 2 and b"already exists" in again.stderr
