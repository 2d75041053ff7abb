"""open_store: one URL picks the store; every CLI's --db and $SKILLOG_DB go through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog import (
    SqliteStore,
    StoreError,
    default_db,
    describe_db,
    is_postgres_url,
    open_store,
    sqlite_path,
)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("skillog.db", "skillog.db"),
        ("sqlite:rel/x.db", "rel/x.db"),
        ("sqlite:///abs/x.db", "/abs/x.db"),
        ("./odd:name.db", "./odd:name.db"),
    ],
)
def test_sqlite_urls_and_paths(url: str, path: str) -> None:
    assert not is_postgres_url(url)
    assert sqlite_path(url) == path
    assert describe_db(url) == url


def test_postgres_urls_are_recognised_and_described_without_password() -> None:
    for url in ("postgresql://u:pw@h/db", "postgres://u:pw@h/db"):
        assert is_postgres_url(url)
        assert describe_db(url) == "postgresql://u@h/db"


@pytest.mark.parametrize(
    "conninfo",
    ["host=127.0.0.1 port=5432 dbname=x", "user=skillog password=p dbname=bench host=/tmp"],
)
def test_a_libpq_connection_string_is_postgres_never_a_file_name(conninfo: str) -> None:
    # Taken for a path, it would create a SQLite database named after the string.
    assert is_postgres_url(conninfo)


async def test_an_unknown_scheme_is_refused_clearly() -> None:
    with pytest.raises(StoreError, match=r"'mysql' is not supported.*postgresql://"):
        async with open_store("mysql://u:pw@h/db"):
            pass  # pragma: no cover


async def test_a_sqlite_url_opens_the_sqlite_store(tmp_path: Path) -> None:
    async with open_store(f"sqlite:{tmp_path / 'x.db'}") as store:
        assert isinstance(store, SqliteStore)
    assert (tmp_path / "x.db").exists()


def test_default_db_follows_skillog_db(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKILLOG_DB", raising=False)
    assert default_db() == "skillog.db"
    monkeypatch.setenv("SKILLOG_DB", "postgresql://h/db")
    assert default_db() == "postgresql://h/db"
