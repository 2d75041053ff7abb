"""Skills as the log pins them: proving a snapshot, and comparing it with a disk.

``skill.activated`` records the skill hash, the blob of the SKILL.md body the composer
used and the manifest of every file. :func:`pin_skill` proves the three agree from the
log alone; :func:`drift` compares them with what is on disk now.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec
import trio

from eventlog import EventStore, SkillogError
from orchestrator import SkillActivated
from orchestrator.skills import (
    ManifestEntry,
    Skill,
    SkillManifest,
    Tier,
    find_skill_dirs,
    hash_manifest,
    manifest_of,
    skill_from_manifest,
)

from ._errors import BrokenLogError
from ._recording import Recording, get_checked_blob


class PinnedSkill(msgspec.Struct, frozen=True, kw_only=True):
    """A skill the session activated, as its log pins it."""

    name: str
    hash: str
    tier: str
    source: str
    seq: int
    files: tuple[ManifestEntry, ...]


async def pin_skill(store: EventStore, session: str, seq: int, event: SkillActivated) -> str:
    """Prove the activation at ``seq`` and return the SKILL.md body the model was shown.

    The manifest must hash to the recorded skill hash, every file's blob must be in the
    log and match its sha256, and the recorded body must be the body of the snapshot's
    SKILL.md. Raises :class:`BrokenLogError` otherwise."""
    what = f"skill.activated {event.name!r}"
    try:
        actual = hash_manifest(event.files)
    except SkillogError as e:
        raise BrokenLogError(session, seq, f"{what}: the recorded manifest is damaged: {e}") from e
    if actual != event.hash:
        raise BrokenLogError(
            session,
            seq,
            f"{what}: the recorded files hash to {actual[:12]}..., not to the recorded skill "
            f"hash {event.hash[:12]}...; the manifest or the hash was altered",
        )
    files: dict[str, bytes] = {}
    for entry in event.files:
        files[entry.sha256] = await get_checked_blob(
            store, entry.sha256, session=session, seq=seq, what=f"{what} file {entry.path!r}"
        )
    raw = await get_checked_blob(
        store, event.body_digest, session=session, seq=seq, what=f"{what} SKILL.md body"
    )
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BrokenLogError(session, seq, f"{what}: the body blob is not UTF-8") from e

    try:
        skill = await rebuild_skill(event, files)
    except SkillogError as e:
        raise BrokenLogError(session, seq, f"{what}: the snapshot does not parse: {e}") from e
    if skill.body != body:
        raise BrokenLogError(
            session,
            seq,
            f"{what}: the recorded body is not the body of the snapshot's SKILL.md; the "
            "body blob or the files were altered",
        )
    return body


async def rebuild_skill(event: SkillActivated, files: Mapping[str, bytes]) -> Skill:
    """The skill an activation pins, rebuilt from its manifest and ``files`` (file
    bytes by sha256) alone. Parsed leniently: the log records what was loaded, and
    re-validating it under stricter rules would make old logs unreadable."""

    async def get(digest: str) -> bytes:
        return files[digest]

    return await skill_from_manifest(
        SkillManifest(entries=event.files, hash=event.hash),
        get,
        tier=_tier(event.tier),
        source=event.source,
        strict=False,
    )


def pinned_skills(recording: Recording) -> list[PinnedSkill]:
    """Each distinct (name, hash) the session activated, in order of first activation."""
    seen: set[tuple[str, str]] = set()
    out: list[PinnedSkill] = []
    for event, body in zip(recording.events, recording.bodies, strict=True):
        if isinstance(body, SkillActivated) and (body.name, body.hash) not in seen:
            seen.add((body.name, body.hash))
            out.append(
                PinnedSkill(
                    name=body.name,
                    hash=body.hash,
                    tier=body.tier,
                    source=body.source,
                    seq=event.seq,
                    files=body.files,
                )
            )
    return out


FileChangeKind = Literal["added", "removed", "modified", "mode"]
DriftStatus = Literal["same", "changed", "missing", "unreadable"]


class FileChange(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    change: FileChangeKind


class Drift(msgspec.Struct, frozen=True, kw_only=True):
    """One pinned skill against the disk: ``same``, ``changed`` (with the files that
    differ), ``missing`` (no directory of that name under the given folders) or
    ``unreadable`` (``problem`` says why)."""

    name: str
    recorded_hash: str
    status: DriftStatus
    path: str | None = None
    disk_hash: str | None = None
    changes: tuple[FileChange, ...] = ()
    problem: str | None = None


async def drift(recording: Recording, dirs: Sequence[str | os.PathLike[str]]) -> list[Drift]:
    """Compare every skill the session activated with the skill of the same name found
    in ``dirs`` (each a skill directory or a folder searched for skills; the first
    match wins, in the order given)."""
    found = await trio.to_thread.run_sync(_skill_dirs, [str(d) for d in dirs])
    out: list[Drift] = []
    for pinned in pinned_skills(recording):
        path = found.get(pinned.name)
        if path is None:
            out.append(Drift(name=pinned.name, recorded_hash=pinned.hash, status="missing"))
            continue
        try:
            manifest = await trio.to_thread.run_sync(manifest_of, path)
        except SkillogError as e:
            out.append(
                Drift(
                    name=pinned.name,
                    recorded_hash=pinned.hash,
                    status="unreadable",
                    path=path,
                    problem=str(e),
                )
            )
            continue
        changes = file_changes(pinned.files, manifest.entries)
        out.append(
            Drift(
                name=pinned.name,
                recorded_hash=pinned.hash,
                status="same" if manifest.hash == pinned.hash else "changed",
                path=path,
                disk_hash=manifest.hash,
                changes=changes,
            )
        )
    return out


def file_changes(
    recorded: Sequence[ManifestEntry], disk: Sequence[ManifestEntry]
) -> tuple[FileChange, ...]:
    """What differs between two manifests, by path (bytewise order)."""
    old = {e.path: e for e in recorded}
    new = {e.path: e for e in disk}
    changes: list[FileChange] = []
    for path in sorted(old.keys() | new.keys(), key=str.encode):
        a, b = old.get(path), new.get(path)
        if a is None:
            changes.append(FileChange(path=path, change="added"))
        elif b is None:
            changes.append(FileChange(path=path, change="removed"))
        elif a.sha256 != b.sha256:
            changes.append(FileChange(path=path, change="modified"))
        elif a.executable != b.executable:
            changes.append(FileChange(path=path, change="mode"))
    return tuple(changes)


def _skill_dirs(roots: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for root in roots:
        # A drift check only reads what the user pointed at: symlinked folders count.
        dirs, _ = find_skill_dirs(
            os.path.abspath(root), max_depth=4, max_dirs=10_000, follow_external=True
        )
        for d in dirs:
            found.setdefault(Path(d).name, d)
    return found


def _tier(value: str) -> Tier:
    try:
        return Tier(value)
    except ValueError:
        return Tier.THIRD_PARTY  # only labels the rebuilt skill; policy came from the log
