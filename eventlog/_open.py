"""One opener for every durable store, chosen by URL: what ``--db`` and $SKILLOG_DB take.

``postgresql://...`` or ``postgres://...``, and libpq's ``key=value`` connection
strings (``host=... dbname=...``), open the PostgreSQL store; ``sqlite:PATH``,
``sqlite:///ABSOLUTE/PATH`` or a plain file path open the SQLite store (the default,
``skillog.db``). A ``key=value`` string is never taken for a file name: opening one as
a SQLite path would silently create a database named after the connection string.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import ModuleType
from typing import TYPE_CHECKING

from sqlite_utils.migrations import Migrations

from ._catalog import Projection
from ._errors import StoreError
from ._types import EventStore

if TYPE_CHECKING:
    from ._postgres import PostgresStore

#: The help text of every command's ``--db``.
DB_HELP = (
    "the event log: a SQLite file or a postgresql://USER:PASSWORD@HOST:PORT/DBNAME URL "
    "(default: $SKILLOG_DB or ./skillog.db)"
)
_POSTGRES = ("postgresql://", "postgres://")


def default_db() -> str:
    """``$SKILLOG_DB``, else ``skillog.db`` in the current directory."""
    return os.environ.get("SKILLOG_DB") or "skillog.db"


_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")
_CONNINFO = re.compile(r"\s*(host|hostaddr|dbname|user|port|service|password)\s*=")


def is_postgres_url(url: str | os.PathLike[str]) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` URL or a libpq ``key=value``
    connection string."""
    return isinstance(url, str) and (url.startswith(_POSTGRES) or bool(_CONNINFO.match(url)))


def sqlite_path(url: str | os.PathLike[str]) -> str:
    """The file path of a SQLite ``url`` (``sqlite:PATH``, ``sqlite:///PATH`` or a path);
    :class:`StoreError` for any other scheme."""
    text = os.fspath(url)
    if text.startswith("sqlite:"):
        path = text[len("sqlite:") :]
        return path[2:] if path.startswith("//") else path
    if _SCHEME.match(text):
        raise StoreError(
            f"database URL scheme {text.split('://')[0]!r} is not supported; use a SQLite "
            "file path (or sqlite:PATH) or postgresql://USER:PASSWORD@HOST:PORT/DBNAME"
        )
    return text


def _postgres() -> ModuleType:
    try:
        from . import _postgres
    except ImportError as e:  # pragma: no cover - the test extra installs psycopg
        raise StoreError(
            f"PostgreSQL needs the psycopg driver ({e}); install it with "
            "pip install 'skillog[postgres]'"
        ) from e
    return _postgres


def open_postgres_store(
    dsn: str,
    *,
    readonly: bool = False,
    connect_timeout: float = 10.0,
    reconnect_timeout: float = 10.0,
    projection: Projection | None = None,
) -> AbstractAsyncContextManager[PostgresStore]:
    """The PostgreSQL store at ``dsn`` (see :func:`eventlog._postgres.open_postgres_store`);
    psycopg (the ``postgres`` extra) is imported only when it is used."""
    opener = _postgres().open_postgres_store
    cm: AbstractAsyncContextManager[PostgresStore] = opener(
        dsn,
        readonly=readonly,
        connect_timeout=connect_timeout,
        reconnect_timeout=reconnect_timeout,
        projection=projection,
    )
    return cm


def describe_db(url: str | os.PathLike[str]) -> str:
    """How messages name the database: a PostgreSQL URL without its password."""
    if is_postgres_url(url):
        redact: Callable[[str], str] = _postgres().redact
        return redact(os.fspath(url))
    return os.fspath(url)


@asynccontextmanager
async def open_store(
    url: str | os.PathLike[str],
    *,
    readonly: bool = False,
    migrations: Sequence[Migrations] = (),
    projection: Projection | None = None,
) -> AsyncIterator[EventStore]:
    """Open the event log at ``url`` (see the module docstring) with each store's
    defaults; ``readonly=True`` never writes and needs an existing log.
    ``migrations``: the domain's SQLite migration sets (see :func:`open_sqlite_store`);
    a PostgreSQL log does not take them. ``projection``: the domain's catalog, kept in
    every append's transaction (eventlog/_catalog.py)."""
    if is_postgres_url(url):
        async with open_postgres_store(
            os.fspath(url), readonly=readonly, projection=projection
        ) as pg:
            yield pg
        return
    from ._sqlite import open_sqlite_store

    async with open_sqlite_store(
        sqlite_path(url), readonly=readonly, migrations=migrations, projection=projection
    ) as sqlite:
        yield sqlite
