"""docs/log-format.md's auditor recipe, executed with the real sqlite3 and sha256sum."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from eventlog import NewEvent, blob_digest, open_sqlite_store

DOC = Path(__file__).parents[2] / "docs" / "log-format.md"
needs_tools = pytest.mark.skipif(
    not (shutil.which("sqlite3") and shutil.which("sha256sum") and shutil.which("sh")),
    reason="the sqlite3 shell and sha256sum are needed",
)


def recipe(marker: str) -> str:
    text = DOC.read_text()
    match = re.search(rf"<!-- {marker} -->\n```sh\n(.*?)```", text, re.S)
    assert match, f"{marker} block missing from {DOC}"
    return match.group(1)


async def make_db(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "skillog.db") as store:
        for blob in (b"a skill file\n", b"", b"\x00\xff"):
            await store.put_blob(blob)
        bodies = [b'{"a":"caf\xc3\xa9"}', b'{"n":-1,"s":"x\\ny"}', b"\x00\xffraw"]
        await store.append(
            "demo",
            [
                NewEvent(type="t.x@2", body=b, recorded_at=1_700_000_000_000_000_000 + i)
                for i, b in enumerate(bodies)
            ],
            expected_seq=0,
        )


def sh(script: str, cwd: Path) -> list[str]:
    out = subprocess.run(
        ["sh", "-e", "-c", script], cwd=cwd, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def tamper(tmp_path: Path, statement: str) -> None:
    conn = sqlite3.connect(tmp_path / "skillog.db")
    with conn:
        conn.execute(statement)
    conn.close()


@needs_tools
async def test_the_hand_recipe_recomputes_the_stored_hash(tmp_path: Path) -> None:
    await make_db(tmp_path)
    computed, stored = sh(recipe("auditor-example"), tmp_path)
    assert len(stored) == 64 and computed == stored
    # And it notices a change of a single byte in the body.
    tamper(tmp_path, "UPDATE events SET body = CAST('{\"n\":-2}' AS BLOB) WHERE seq = 1")
    computed, stored = sh(recipe("auditor-example"), tmp_path)
    assert computed != stored


@needs_tools
async def test_the_link_query_is_silent_when_intact_and_names_a_break(tmp_path: Path) -> None:
    await make_db(tmp_path)
    assert sh(recipe("auditor-links"), tmp_path) == []
    tamper(tmp_path, "DELETE FROM events WHERE seq = 1")
    assert sh(recipe("auditor-links"), tmp_path) == ["demo|2"]


@needs_tools
async def test_the_blob_loop_is_silent_when_intact_and_names_a_changed_blob(
    tmp_path: Path,
) -> None:
    await make_db(tmp_path)
    assert sh(recipe("auditor-blobs"), tmp_path) == []
    tamper(tmp_path, "UPDATE blobs SET data = x'00fe' WHERE data = x'00ff'")
    assert sh(recipe("auditor-blobs"), tmp_path) == [blob_digest(b"\x00\xff")]
