"""The persistent skills index: a cache in the SQLite database, keyed by skill directory.

A warm start re-reads nothing that did not change. For each skill directory the index
keeps a fingerprint of every file's and directory's stat (relative path, size,
mtime_ns, ctime_ns, inode, executable bit, plus the validation mode), the list of those
paths, and the result of the last load (properties and hash, or the problems). A warm
scan re-stats the known paths without listing a single directory (a directory's mtime
changes when an entry is added, removed or renamed in it) and reads and hashes nothing
when the fingerprint is unchanged; otherwise it walks and loads the skill afresh.

Like git's racy-index rule, a result whose newest file was modified within
``RACY_NS`` of the scan is not trusted next time (a same-size rewrite within the
filesystem's timestamp granularity would otherwise go unseen); it is re-read until it
has aged.

Tables (prefixed ``skills_``, next to the event log's tables, never touching them):
``skills_index(root PRIMARY KEY, fingerprint, racy, record, paths, indexed_at)`` and
``skills_schema(version)``. It is a cache: on a schema change it is rebuilt.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import msgspec
import sqlite_utils

from eventlog import create_private

from ._errors import Problem, SkillIndexError
from ._model import SkillProperties

SCHEMA_VERSION = 3
RACY_NS = 2_000_000_000  # FAT's 2 s timestamps are the coarsest in common use


class IndexedSkill(msgspec.Struct, frozen=True, kw_only=True):
    """What loading one skill directory gave: a valid skill's data, or its problems."""

    root: str
    location: str | None = None
    properties: SkillProperties | None = None
    hash: str | None = None
    last_modified: int = 0  # newest file mtime, ns
    warnings: tuple[Problem, ...] = ()
    problems: tuple[Problem, ...] = ()
    headings: tuple[str, ...] = ()


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(IndexedSkill)
_paths_decoder = msgspec.json.Decoder(tuple[list[str], list[str]])


def fingerprint(stamps: Iterable[bytes], strict: bool) -> str:
    """A digest of everything that, if unchanged, makes re-reading the tree pointless.

    ``stamps`` are the tree's stat stamps (``_tree.stamps``). Directory stats stand for
    the entries that are not files (special files, escaping symlinks, unreadable
    entries): any of them appearing or leaving changes its directory's mtime, so the
    tree's problems need not enter the digest.
    """
    h = hashlib.sha256(b"strict\0" if strict else b"lenient\0")
    h.update(b"".join(stamps))
    return h.hexdigest()


class SkillIndex:
    """The ``skills_`` tables of one SQLite database (sharing the file with the log)."""

    def __init__(self, path: str) -> None:
        self.path = path
        if path != ":memory:":
            # The index may create the log's file (a runtime indexes before it opens
            # the log): made owner-only, as the log makes it.
            create_private(Path(path))
        try:
            conn = sqlite3.connect(path, timeout=10.0, check_same_thread=False)
            self._db = sqlite_utils.Database(conn)
            # The log uses WAL too (journal mode is a property of the file). The index
            # is a cache, so losing its last write on power loss only costs a re-read.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.Error as e:
            if getattr(e, "sqlite_errorcode", 0) & 0xFF in (10, 13):  # IOERR, FULL
                raise SkillIndexError(
                    f"{path}: cannot use the skills index ({e}); the disk holding it is "
                    "likely full: free space there, point --db at another disk, or pass "
                    "--no-index"
                ) from e
            raise SkillIndexError(
                f"{path}: cannot use the skills index ({e}); is it a skillog SQLite database? "
                "Point --db at another file or delete the damaged one"
            ) from e

    def close(self) -> None:
        """Close the connection."""
        self._db.conn.close()

    def load(self) -> dict[str, tuple[str, bool, bytes, bytes]]:
        """Every row: root -> (fingerprint, racy, record bytes, paths bytes)."""
        try:
            rows = self._db.execute(
                "SELECT root, fingerprint, racy, record, paths FROM skills_index"
            )
            return {r[0]: (r[1], bool(r[2]), r[3], r[4]) for r in rows.fetchall()}
        except sqlite3.Error as e:
            raise SkillIndexError(f"{self.path}: cannot read the skills index ({e})") from e

    @staticmethod
    def decode(record: bytes) -> IndexedSkill | None:
        """A stored record, or ``None`` if it does not decode (then it is re-read)."""
        try:
            return _decoder.decode(record)
        except msgspec.DecodeError:
            return None

    @staticmethod
    def decode_paths(paths: bytes) -> tuple[list[str], list[str]] | None:
        """The stored ``(directories, files)`` of a tree, or ``None`` if damaged."""
        try:
            dirs, files = _paths_decoder.decode(paths)
        except msgspec.DecodeError:
            return None
        return dirs, files

    def save(
        self,
        rows: list[tuple[str, str, bool, IndexedSkill, tuple[list[str], list[str]]]],
        *,
        keep: set[str],
        now: int,
    ) -> None:
        """Upsert changed ``(root, fingerprint, racy, record)`` rows; drop roots not in ``keep``."""
        try:
            with self._db.conn:
                self._db.conn.executemany(
                    "INSERT OR REPLACE INTO skills_index (root, fingerprint, racy, record, "
                    "paths, indexed_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (r, fp, int(racy), _encoder.encode(rec), _encoder.encode(paths), now)
                        for r, fp, racy, rec, paths in rows
                    ],
                )
                stale = [
                    (r,)
                    for (r,) in self._db.execute("SELECT root FROM skills_index").fetchall()
                    if r not in keep
                ]
                self._db.conn.executemany("DELETE FROM skills_index WHERE root = ?", stale)
        except sqlite3.Error as e:
            raise SkillIndexError(f"{self.path}: cannot write the skills index ({e})") from e

    def _migrate(self) -> None:
        # One immediate transaction around check, drop and create: many processes open
        # the index at once (a service starting sessions), and outside a transaction
        # one's DROP could land between another's CREATE and its first read.
        conn = self._db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS skills_schema (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM skills_schema").fetchone()
            if row is None or row[0] != SCHEMA_VERSION:
                conn.execute("DROP TABLE IF EXISTS skills_index")
                conn.execute("DELETE FROM skills_schema")
                conn.execute("INSERT INTO skills_schema (version) VALUES (?)", [SCHEMA_VERSION])
                conn.execute(
                    "CREATE TABLE skills_index (root TEXT PRIMARY KEY, fingerprint TEXT, "
                    "racy INTEGER, record BLOB, paths BLOB, indexed_at INTEGER)"
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
