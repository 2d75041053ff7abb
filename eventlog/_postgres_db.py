"""Opening a skillog PostgreSQL database: connections, error mapping, migrations.

The tables have the names and columns of the SQLite format (docs/log-format.md), in the
connection's schema (the first on ``search_path``; set it in the DSN with
``options=-csearch_path=NAME`` to keep several logs, or a log beside other tables named
``events``, in one database). ``stream`` and the digests sort bytewise (``COLLATE "C"``),
like SQLite and Python. Migrations are named and numbered; each is recorded in
``eventlog_migrations`` in the same transaction as the change, under an advisory lock so
two processes opening a fresh database do not both migrate.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict

from ._errors import (
    DatabaseFormatError,
    DatabaseFullError,
    DatabaseLockedError,
    ReadOnlyDatabaseError,
    StoreError,
)

#: (name, SQL) in order; the schema version of a database is how many are applied.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_events_blobs",
        # position is given by the writer under the table lock, so it increases in
        # commit order (followers never miss an event that commits late). UNIQUE
        # (stream, seq) is the last line of defence against a fork, whoever writes.
        """
        CREATE TABLE events (
            position BIGINT PRIMARY KEY,
            stream TEXT COLLATE "C" NOT NULL,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            recorded_at BIGINT NOT NULL,
            body BYTEA NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            UNIQUE (stream, seq)
        );
        CREATE TABLE blobs (digest TEXT COLLATE "C" PRIMARY KEY, data BYTEA NOT NULL);
        """,
    ),
    (
        "0002_snapshots",
        """
        CREATE TABLE eventlog_snapshots (
            stream TEXT COLLATE "C" NOT NULL,
            name TEXT COLLATE "C" NOT NULL,
            seq BIGINT NOT NULL,
            hash TEXT NOT NULL,
            state BYTEA NOT NULL,
            PRIMARY KEY (stream, name)
        );
        """,
    ),
)
MIGRATIONS += (
    (
        "0003_catalog",
        # The catalog (eventlog/_catalog.py); eventlog_catalog_meta names the projection
        # version that built it (no row: not current).
        """
        CREATE TABLE eventlog_catalog (
            key TEXT COLLATE "C" PRIMARY KEY,
            status TEXT NOT NULL,
            claimable BOOLEAN NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            text TEXT NOT NULL,
            pending INTEGER NOT NULL,
            holder TEXT,
            lease_until BIGINT NOT NULL,
            doc TEXT NOT NULL
        );
        CREATE INDEX eventlog_catalog_recent ON eventlog_catalog (created_at, key);
        CREATE INDEX eventlog_catalog_claimable ON eventlog_catalog (created_at, key)
            WHERE claimable = true;
        CREATE INDEX eventlog_catalog_pending ON eventlog_catalog (created_at, key)
            WHERE pending > 0;
        CREATE TABLE eventlog_catalog_meta (version TEXT NOT NULL);
        """,
    ),
)
MIGRATIONS += (
    (
        "0004_tombstones",
        # Retention (eventlog/_archive.py): what the log keeps of an archived stream.
        """
        CREATE TABLE eventlog_tombstones (
            stream TEXT COLLATE "C" PRIMARY KEY,
            length BIGINT NOT NULL,
            head_hash TEXT NOT NULL,
            checkpoint TEXT NOT NULL
        );
        """,
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
#: pg_advisory_xact_lock key of migrations ("skillog" in ASCII).
_MIGRATION_LOCK = 0x736B696C6C6F67
#: The channel every append transaction NOTIFYs (payload: the last position).
CHANNEL = "skillog_events"
_OURS = ("events", "blobs", "eventlog_snapshots", "eventlog_catalog")


def redact(dsn: str) -> str:
    """The DSN as a ``postgresql://user@host:port/dbname`` URL without its password,
    for messages; an unparseable DSN is not echoed (it may hold a password)."""
    try:
        p = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparseable PostgreSQL DSN>"
    user = f"{p['user']}@" if p.get("user") else ""
    host = p.get("host", "")
    port = f":{p['port']}" if p.get("port") else ""
    return f"postgresql://{user}{host}{port}/{p.get('dbname', '')}"


def where(dsn: str) -> str:
    """How errors name the database."""
    return f"database {redact(dsn)}"


def connect(dsn: str, *, role: str, connect_timeout: float) -> psycopg.Connection[Any]:
    """An autocommit connection (transactions are explicit) named ``skillog ROLE`` in
    ``pg_stat_activity``. Settings in the DSN win over these defaults."""
    try:
        params: dict[str, Any] = conninfo_to_dict(dsn)
    except psycopg.Error as e:
        raise StoreError(
            f"{redact(dsn)} is not a valid PostgreSQL connection string ({e}); "
            "use postgresql://USER:PASSWORD@HOST:PORT/DBNAME"
        ) from e
    params.setdefault("application_name", f"skillog {role}")
    params.setdefault("connect_timeout", str(max(1, round(connect_timeout))))
    # Keepalives: a follower blocked on LISTEN learns of a dead server or network.
    for key, value in (("keepalives_idle", "30"), ("keepalives_interval", "10")):
        params.setdefault(key, value)
    params.setdefault("keepalives_count", "3")
    try:
        conn = psycopg.connect(autocommit=True, **params)
    except psycopg.Error as e:
        raise connect_error(e, dsn) from e
    try:
        (encoding,) = _one(conn, "SHOW server_encoding")
        if encoding != "UTF8":
            raise DatabaseFormatError(
                f"{where(dsn)}: server encoding is {encoding}, not UTF8; skillog stores "
                "Unicode stream ids and types - create the database WITH ENCODING 'UTF8'"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def connect_error(e: psycopg.Error, dsn: str) -> StoreError:
    """The error for a connection that could not be opened."""
    text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    if "password authentication failed" in str(e) or "no password supplied" in str(e):
        return StoreError(
            f"{where(dsn)}: authentication failed ({text}); check the user and password "
            "(in the DSN, $PGPASSWORD or ~/.pgpass)"
        )
    return StoreError(
        f"{where(dsn)}: cannot connect ({text}); check that the server is running and "
        "reachable and that the DSN (host, port, dbname) is right"
    )


def translate(e: psycopg.Error, dsn: str, doing: str) -> StoreError:
    """A clear :class:`StoreError` for a psycopg error (raise it ``from e``)."""
    at = f"{where(dsn)}: {doing}"
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, errors.QueryCanceled):
        return StoreError(
            f"{at}: the server cancelled the statement ({first}: statement_timeout or a "
            "cancel request); nothing of this transaction was written - retry, or raise "
            "statement_timeout for this role or database"
        )
    if isinstance(e, errors.LockNotAvailable):
        return DatabaseLockedError(f"{at}: a lock was not available ({first}); retry later")
    if isinstance(e, (errors.DiskFull, errors.OutOfMemory, errors.ProgramLimitExceeded)):
        return DatabaseFullError(
            f"{at}: the server is out of space ({first}); nothing of this transaction was "
            "written - free space and retry"
        )
    if isinstance(e, (errors.ReadOnlySqlTransaction, errors.InsufficientPrivilege)):
        return ReadOnlyDatabaseError(
            f"{at}: not allowed to write ({first}); grant this role INSERT on the skillog "
            "tables, or open the store read-only"
        )
    if isinstance(e, psycopg.OperationalError):
        return StoreError(f"{at}: lost the connection to the server ({first})")
    return StoreError(f"{at}: {type(e).__name__}: {first}")


def _one(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> Any:
    row = conn.execute(sql.encode(), params).fetchone()
    assert row is not None
    return row


def schema_version(conn: psycopg.Connection[Any], dsn: str) -> int | None:
    """The applied migrations' count; None when the schema has no skillog tables.

    Refuses tables of ours that skillog did not create, and a schema written by a newer
    skillog (more migrations than this code knows, or names it does not know).
    """
    (regclass,) = _one(conn, "SELECT to_regclass('eventlog_migrations')::text")
    if regclass is None:
        found = [t for t in _OURS if _one(conn, "SELECT to_regclass(%s)::text", (t,))[0]]
        if found:
            raise DatabaseFormatError(
                f"{where(dsn)}: has a table named {found[0]!r} but no `eventlog_migrations`; "
                "it was not written by skillog - use another database, or another schema "
                "with options=-csearch_path=NAME in the DSN"
            )
        return None
    rows = conn.execute(
        b"SELECT version, name FROM eventlog_migrations ORDER BY version"
    ).fetchall()
    known = {i + 1: name for i, (name, _) in enumerate(MIGRATIONS)}
    for version, name in rows:
        if known.get(version) != name:
            raise DatabaseFormatError(
                f"{where(dsn)}: schema migration {version} {name!r} is not one this skillog "
                f"knows (it knows {SCHEMA_VERSION}); it was written by a newer version - "
                "upgrade skillog"
            )
    if [v for v, _ in rows] != list(range(1, len(rows) + 1)):
        raise DatabaseFormatError(
            f"{where(dsn)}: eventlog_migrations is not a contiguous list of migrations "
            f"({[v for v, _ in rows]}); the schema was altered by hand"
        )
    return len(rows)


def migrate(conn: psycopg.Connection[Any], dsn: str, *, upto: int = SCHEMA_VERSION) -> None:
    """Apply the pending migrations (through number ``upto``) in one transaction."""
    try:
        with conn.transaction():
            conn.execute(b"SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            version = schema_version(conn, dsn)
            if version is None:
                conn.execute(
                    b"CREATE TABLE eventlog_migrations (version INTEGER PRIMARY KEY, "
                    b"name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
                version = 0
            for number in range(version + 1, upto + 1):
                name, sql = MIGRATIONS[number - 1]
                conn.execute(sql.encode())
                conn.execute(
                    b"INSERT INTO eventlog_migrations (version, name) VALUES (%s, %s)",
                    (number, name),
                )
    except psycopg.Error as e:
        raise translate(e, dsn, "preparing the schema") from e


def check_readable(conn: psycopg.Connection[Any], dsn: str) -> None:
    """For read-only opens: the schema must exist and be this code's version."""
    try:
        version = schema_version(conn, dsn)
    except psycopg.Error as e:
        raise translate(e, dsn, "reading the schema") from e
    if version is None:
        raise DatabaseFormatError(
            f"{where(dsn)}: no skillog event log here (no `eventlog_migrations` table in "
            "the schema on search_path); check the DSN"
        )
    if version < SCHEMA_VERSION:
        raise DatabaseFormatError(
            f"{where(dsn)}: schema version {version} is older than this skillog's "
            f"({SCHEMA_VERSION}); open it once read-write to upgrade it"
        )
