"""Snapshots: a folded state stored with the chain position (seq, hash) it covers."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The state of ``stream`` folded through event ``seq`` whose hash is ``hash``.

    ``name`` identifies the reducer and the state encoding (change it when either
    changes, and old snapshots are simply not used). ``state`` is opaque bytes. A
    snapshot is a cache, not evidence: it is checked against the chain on use, but an
    audit refolds from seq 0.
    """

    stream: str
    name: str
    seq: int
    hash: str
    state: bytes


@runtime_checkable
class SnapshotStore(Protocol):
    """A store that keeps one snapshot per (stream, name)."""

    async def save_snapshot(self, snapshot: Snapshot) -> None: ...

    async def load_snapshot(self, stream: str, name: str) -> Snapshot | None: ...
