"""Opening a skillog SQLite database: connections, pragmas, migrations, error mapping.

The format is public (docs/log-format.md). Tables this package owns: ``events``,
``blobs``, ``eventlog_snapshots`` and ``eventlog_meta``; migrations are recorded by
sqlite-utils in ``_sqlite_migrations`` (set ``eventlog``) in the same transaction as the
change. Any other table is left alone, so other packages can share the file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import sqlite_utils
from sqlite_utils.migrations import Migrations

from ._errors import (
    DatabaseFormatError,
    DatabaseFullError,
    DatabaseLockedError,
    ReadOnlyDatabaseError,
    StoreError,
)

#: The on-disk format this code writes and the newest it can read.
FORMAT_VERSION = 1
SYNCHRONOUS = ("FULL", "NORMAL")
READER_CACHE_KIB = 256
_MIGRATION_SET = "eventlog"
T = TypeVar("T")
_SQLITE_MAGIC = b"SQLite format 3\x00"

migrations = Migrations(_MIGRATION_SET)

#: :func:`eventlog._hashchain.in_log` in SQLite's SQL, for a query that already names a
#: valid stream: the row's seq is an integer >= 0 (a REAL, TEXT or BLOB seq is not).
SEQ_IN_LOG = "typeof(seq) = 'integer' AND seq >= 0"
#: The whole rule, for queries over every stream: the stream id is text of 1..256
#: characters without a control character (NUL is looked for in the bytes, because
#: SQLite's text functions stop at one).
IN_LOG = (
    f"{SEQ_IN_LOG} AND typeof(stream) = 'text' AND length(stream) BETWEEN 1 AND 256 "
    "AND instr(CAST(stream AS BLOB), x'00') = 0 AND stream NOT GLOB '*[\x01-\x1f\x7f]*'"
)


@migrations(name="0001_events_blobs")
def _m0001(db: sqlite_utils.Database) -> None:
    # position is the rowid, so commits append to the end of the table (a group commit
    # of 64 streams touches a few pages, not 64 leaves). UNIQUE (stream, seq) is the
    # key of a chain and the last line of defence against a fork: a second event at a
    # seq fails with an IntegrityError, whoever wrote it.
    db.execute(
        """CREATE TABLE events (
            position INTEGER PRIMARY KEY,
            stream TEXT NOT NULL,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            recorded_at INTEGER NOT NULL,
            body BLOB NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            UNIQUE (stream, seq)
        )"""
    )
    db.execute("CREATE TABLE blobs (digest TEXT PRIMARY KEY, data BLOB NOT NULL)")
    db.execute(
        """CREATE TABLE eventlog_snapshots (
            stream TEXT NOT NULL,
            name TEXT NOT NULL,
            seq INTEGER NOT NULL,
            hash TEXT NOT NULL,
            state BLOB NOT NULL,
            PRIMARY KEY (stream, name)
        )"""
    )
    db.execute("CREATE TABLE eventlog_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute(
        "INSERT INTO eventlog_meta (key, value) VALUES ('format_version', ?)",
        [str(FORMAT_VERSION)],
    )


@migrations(name="0002_log_events_view")
def _m0002(db: sqlite_utils.Database) -> None:
    # The rows of the log (the rule every reader applies), for SQL users: the type's tag
    # without its schema version and the body as JSON text (NULL if it is not JSON), so
    # views and ad-hoc queries can json_extract() without knowing the storage.
    db.execute(
        f"""CREATE VIEW log_events AS SELECT
            position, stream, seq,
            CASE WHEN instr(type, '@') > 0 THEN substr(type, 1, instr(type, '@') - 1)
                 ELSE type END AS tag,
            type, recorded_at,
            CASE WHEN typeof(body) = 'blob' AND json_valid(CAST(body AS TEXT))
                 THEN CAST(body AS TEXT) END AS body_json,
            hash
        FROM events WHERE {IN_LOG}"""
    )


@migrations(name="0003_catalog")
def _m0003(db: sqlite_utils.Database) -> None:
    # The catalog (eventlog/_catalog.py): one row per key, maintained in the append's
    # transaction by the domain's projection. Built when `eventlog_meta.catalog` names
    # the projection's version; empty until a store opened with a projection fills it.
    db.execute(
        """CREATE TABLE eventlog_catalog (
            key TEXT PRIMARY KEY,
            status TEXT NOT NULL,
            claimable INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            text TEXT NOT NULL,
            pending INTEGER NOT NULL,
            holder TEXT,
            lease_until INTEGER NOT NULL,
            doc TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX eventlog_catalog_recent ON eventlog_catalog (created_at, key)")
    db.execute(
        "CREATE INDEX eventlog_catalog_claimable ON eventlog_catalog (created_at, key) "
        "WHERE claimable = 1"
    )
    db.execute(
        "CREATE INDEX eventlog_catalog_pending ON eventlog_catalog (created_at, key) "
        "WHERE pending > 0"
    )


@migrations(name="0004_tombstones")
def _m0004(db: sqlite_utils.Database) -> None:
    # Retention (eventlog/_archive.py): what the log keeps of a stream moved whole into
    # an archive file, a projection of the `log.archived` events that `verify` checks.
    db.execute(
        """CREATE TABLE eventlog_tombstones (
            stream TEXT PRIMARY KEY,
            length INTEGER NOT NULL,
            head_hash TEXT NOT NULL,
            checkpoint TEXT NOT NULL
        )"""
    )


def translate(e: sqlite3.Error, path: str | os.PathLike[str], doing: str) -> StoreError:
    """A clear :class:`StoreError` for a sqlite3 error (raise it ``from e``)."""
    code = getattr(e, "sqlite_errorcode", 0) & 0xFF
    where = f"database {os.fspath(path)}: {doing}"
    if code in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
        return DatabaseLockedError(
            f"{where}: the database is locked by another writer and stayed locked past "
            "the busy timeout; stop the other process or retry later"
        )
    if code == 13:  # SQLITE_FULL
        return DatabaseFullError(
            f"{where}: the disk or the database size limit is full; nothing of this "
            "transaction was written - free space and retry"
        )
    if code == 10 and _full(path):  # SQLITE_IOERR: e.g. no room for the -shm file
        return DatabaseFullError(
            f"{where}: the disk holding the database is full ({e}: no room for SQLite's "
            "-wal, -shm or journal file, which even a reader needs); free space on that "
            "disk (to read the log now, copy it with its -wal to another disk)"
        )
    if code == 8:  # SQLITE_READONLY
        return ReadOnlyDatabaseError(
            f"{where}: the database is read-only (file or directory not writable); "
            "fix the permissions or open it read-only"
        )
    if code in (26, 11):  # SQLITE_NOTADB, SQLITE_CORRUPT
        return DatabaseFormatError(
            f"{where}: the file is not a SQLite database or is corrupt ({e}); "
            "check the path, restore from a backup or an export"
        )
    if code == 14:  # SQLITE_CANTOPEN
        return StoreError(
            f"{where}: cannot open the file ({e}); check the path and that its directory "
            "exists and is writable"
        )
    return StoreError(f"{where}: {type(e).__name__}: {e}")


def _full(path: str | os.PathLike[str]) -> bool:
    """Whether the file system holding database ``path`` lacks room for a -shm file."""
    try:
        stats = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 64 * 1024


def remove_if_empty(path: Path) -> None:
    """Remove a database file this process just created and could not set up (a full
    disk), if it holds nothing: an empty -wal (no commit) and a main file of at most
    one page (every table needs a page of its own beyond the first)."""
    wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    try:
        if wal.exists() and wal.stat().st_size:
            return
        with path.open("rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
        page = int.from_bytes(header[16:18], "big") if len(header) == 100 else 0
        if size > (65536 if page == 1 else page):
            return
        for p in (path, wal, shm):
            p.unlink(missing_ok=True)
    except OSError:
        pass  # best effort: the error that got us here is the one to report


def check_file(path: Path, *, must_exist: bool) -> None:
    """Refuse paths that are not SQLite files before sqlite3 gets a chance to misreport."""
    if not path.exists():
        if must_exist:
            raise StoreError(f"database {path}: no such file; check --db or $SKILLOG_DB")
        if not path.parent.is_dir():
            raise StoreError(f"database {path}: directory {path.parent} does not exist")
        return
    if not path.is_file():
        raise DatabaseFormatError(f"database {path}: not a regular file")
    try:
        with path.open("rb") as f:
            magic = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise StoreError(f"database {path}: cannot read the file: {e.strerror}") from e
    if magic and magic != _SQLITE_MAGIC:
        raise DatabaseFormatError(
            f"database {path}: not a SQLite database (bad header); check the path"
        )


def connect(
    path: Path,
    *,
    readonly: bool,
    synchronous: str = "FULL",
    busy_timeout: float = 5.0,
) -> sqlite3.Connection:
    """A configured connection. Transactions are explicit (isolation_level=None).

    Read-only connections open the file with ``mode=ro``; when that cannot work because
    the file's directory is not writable (read-only media: SQLite needs the ``-shm``
    file), and no ``-wal`` file holds commits the main file lacks, they open it with
    ``immutable=1`` instead, which takes no lock and writes nothing. A connection whose
    setup fails is closed (no descriptor outlives a failed open).
    """
    if not readonly:
        create_private(path)
    conn = _open(path, "mode=ro" if readonly else None, busy_timeout)
    try:
        if readonly:
            conn.execute("PRAGMA query_only=1")
            try:
                # The first read opens the file (and its -shm): errors surface here.
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as e:
                if getattr(e, "sqlite_errorcode", 0) & 0xFF not in (8, 14):  # READONLY, CANTOPEN
                    raise
                conn.close()
                conn = _open(path, _immutable(path, e), busy_timeout)
                conn.execute("PRAGMA query_only=1")
            # Readers scan: a small page cache (the OS caches the file) bounds the memory
            # of many reader connections; the writer keeps SQLite's default (2 MiB).
            conn.execute(f"PRAGMA cache_size=-{READER_CACHE_KIB}")
        else:
            # WAL: readers never block the writer and a commit is one append + fsync.
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"database {path}: cannot switch to WAL mode (got {mode})")
        # FULL: a commit is on disk (WAL fsynced) before append returns, so an
        # acknowledged event survives power loss. NORMAL: it survives an application
        # crash, but the last commits before a power loss may roll back.
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn
    except BaseException as e:
        conn.close()
        if isinstance(e, sqlite3.Error):
            raise translate(e, path, "opening") from e
        raise


def create_private(path: Path) -> None:
    """Create ``path`` empty and readable by its owner only (0600), unless it exists.

    A log holds task text, prompts and outputs, so a new one is not world-readable;
    SQLite gives the ``-wal`` and ``-shm`` files it makes the database file's mode. An
    existing file keeps the mode its owner chose. An empty file is an empty database;
    when the file cannot be made here, SQLite's own open reports why.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    os.close(fd)


def _open(path: Path, mode: str | None, busy_timeout: float) -> sqlite3.Connection:
    target: str | Path = path if mode is None else f"{path.resolve().as_uri()}?{mode}"
    try:
        return sqlite3.connect(
            target,
            uri=mode is not None,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as e:
        raise translate(e, path, "opening") from e


def _immutable(path: Path, e: sqlite3.Error) -> str:
    """``immutable=1`` for a log on read-only media, if no commit waits in its WAL."""
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise ReadOnlyDatabaseError(
            f"database {path}: cannot be opened where it is ({e}) and {wal.name} holds "
            "commits the main file lacks; copy the file with its -wal to writable media, "
            "or take `skillog log snapshot` where it was written"
        ) from e
    return "immutable=1"


def immediate(conn: sqlite3.Connection, path: Path, doing: str, fn: Callable[[], T]) -> T:
    """``fn()`` inside one ``BEGIN IMMEDIATE`` transaction: committed, or rolled back on
    any exception; a sqlite3 error comes out as the :class:`StoreError` for ``doing``."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as e:
        raise translate(e, path, doing) from e
    return result


def migrate(conn: sqlite3.Connection, path: Path, domain: Sequence[Migrations] = ()) -> None:
    """Apply pending migrations atomically; refuse a database from a newer format.

    ``domain``: the migration sets of the package that uses the log (its own tables
    and views, e.g. the orchestrator's audit views), applied after the log's own in the
    same transaction and recorded under their own set names."""
    db = sqlite_utils.Database(conn, execute_plugins=False, recursive_triggers=False)

    def apply() -> None:
        _check_version(db, path)
        migrations.apply(db)
        for extra in domain:
            extra.apply(db)

    # IMMEDIATE: two processes opening a fresh file must not both migrate.
    immediate(conn, path, "preparing the schema", apply)


def check_readable(conn: sqlite3.Connection, path: Path) -> None:
    """For read-only opens: the schema must exist and not be from a newer format."""
    db = sqlite_utils.Database(conn, execute_plugins=False, recursive_triggers=False)
    try:
        _check_version(db, path)
        if not db["events"].exists():
            raise DatabaseFormatError(
                f"database {path}: no skillog event log in this file (no `events` table)"
            )
    except sqlite3.Error as e:
        raise translate(e, path, "reading the schema") from e


def _check_version(db: sqlite_utils.Database, path: Path) -> None:
    if not db["eventlog_meta"].exists():
        if db["events"].exists():
            raise DatabaseFormatError(
                f"database {path}: has an `events` table but no `eventlog_meta`; it was "
                "not written by skillog"
            )
        return
    row = db.execute("SELECT value FROM eventlog_meta WHERE key = 'format_version'").fetchone()
    version = row[0] if row else None
    if not (isinstance(version, str) and version.isdigit()):
        raise DatabaseFormatError(f"database {path}: eventlog_meta.format_version is {version!r}")
    if int(version) > FORMAT_VERSION:
        raise DatabaseFormatError(
            f"database {path}: format version {version} is newer than this skillog "
            f"understands ({FORMAT_VERSION}); upgrade skillog to open it"
        )
    known = {m.name for m in migrations._migrations}
    unknown = [m.name for m in migrations.applied(db) if m.name not in known]
    if unknown:
        raise DatabaseFormatError(
            f"database {path}: has migrations this skillog does not know ({', '.join(unknown)}); "
            "it was written by a newer version - upgrade skillog"
        )


def vacuum(path: Path) -> None:
    """``VACUUM`` the database at ``path`` (no store open on it in this process): the
    file shrinks to what it holds, after a deletion such as ``log archive``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as e:
        raise translate(e, path, "vacuuming") from e
    finally:
        conn.close()
