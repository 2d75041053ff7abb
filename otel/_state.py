"""Where offline export stopped: a small JSON file next to the database.

The state lives outside the database so that exporting never writes to the log (an
auditor's copy can be exported read-only). It records, per session, the head hash that
was accepted by the exporter, and the log position ``--follow`` resumes from. Losing
or deleting it is harmless: everything is exported again with the same ids, and OTLP
backends deduplicate.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from eventlog import describe_db, is_postgres_url, sqlite_path, write_file

from ._errors import OtelError

STATE_VERSION = 1


class ExportState(msgspec.Struct, kw_only=True):
    """``exported`` maps a session id to the hash of the last event exported with it;
    ``position`` is the log position the next ``--follow`` starts reading at."""

    version: int = STATE_VERSION
    position: int = 0
    exported: dict[str, str] = msgspec.field(default_factory=dict)


def default_state_path(db: str | os.PathLike[str]) -> Path:
    """``<db>.otel-state.json``: the state file of the SQLite database ``db``; for a
    PostgreSQL URL, ``skillog-pg-<digest>.otel-state.json`` in the current directory
    (the digest of the URL without its password, so the name holds no secret)."""
    if is_postgres_url(db):
        digest = hashlib.sha256(describe_db(db).encode()).hexdigest()[:16]
        return Path(f"skillog-pg-{digest}.otel-state.json")
    return Path(f"{sqlite_path(db)}.otel-state.json")


def load_state(path: Path) -> ExportState:
    """The saved state, or a fresh one if the file does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ExportState()
    except OSError as e:
        raise OtelError(f"export state {path}: cannot be read ({e}); fix its permissions") from e
    try:
        state = msgspec.json.decode(data, type=ExportState)
    except msgspec.MsgspecError as e:
        raise OtelError(
            f"export state {path}: not a valid state file ({e}); delete it to export "
            "every session again (ids are deterministic, backends deduplicate)"
        ) from e
    if state.version != STATE_VERSION:
        raise OtelError(
            f"export state {path}: version {state.version} is not {STATE_VERSION}; "
            "delete it or use the skillog version that wrote it"
        )
    return state


def save_state(path: Path, state: ExportState) -> None:
    """Write ``state`` atomically (a crash leaves the old or the new file, never half)."""
    write_file(
        path,
        msgspec.json.encode(state, order="sorted"),
        what="export state",
        option="--state PATH (in a writable directory)",
    )
