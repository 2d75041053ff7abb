"""Snapshot a skill's files into the log's blob store, and read a skill back from it.

A :class:`SkillManifest` plus the blobs it names is the whole skill, so replay rebuilds
the ``SKILL.md`` body and every resource without a filesystem, and proves each blob
against the manifest's sha256 and the manifest against the recorded skill hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from ._errors import ManifestError, Problem, SkillChangedError
from ._hash import SKILL_MD_NAMES, hash_manifest, make_manifest
from ._inline import InlineSkill
from ._model import ManifestEntry, Skill, SkillManifest, Tier
from ._parse import parse_skill_md
from ._tree import TreeFile, read_file, walk_tree

GetBlob = Callable[[str], Awaitable[bytes]]


class BlobStore(Protocol):
    """The part of ``eventlog.EventStore`` a snapshot needs."""

    async def put_blob(self, data: bytes) -> str: ...

    async def get_blob(self, digest: str) -> bytes: ...


async def snapshot_skill(store: BlobStore, skill: Skill | InlineSkill) -> SkillManifest:
    """Put every file of ``skill`` into ``store`` and return its manifest.

    Raises :class:`SkillChangedError` if the files on disk no longer hash to
    ``skill.hash`` (they changed since the skill was loaded): the log must never
    record bytes under a hash they do not have.
    """
    if isinstance(skill, InlineSkill):
        await _put(store, skill.skill_md())
        return skill.manifest()
    if skill.root is None:
        raise ManifestError(f"skill {skill.name!r} has no root; snapshot its InlineSkill instead")
    # One thread hop for the walk and every file (a hop each cost the event loop more
    # than the reads: a service loads skills for dozens of sessions a second).
    files, problems, contents = await trio.to_thread.run_sync(_read_tree, skill.root)
    if problems:
        raise SkillChangedError(
            f"skill {skill.name!r} at {skill.root} can no longer be read: {problems[0]}"
        )
    entries: list[ManifestEntry] = []
    for f, data in zip(files, contents, strict=True):
        if isinstance(data, OSError):
            raise SkillChangedError(
                f"skill {skill.name!r}: {f.rel} can no longer be read ({data}); reload the skill"
            ) from data
        entries.append(
            ManifestEntry(path=f.rel, executable=f.executable, sha256=await _put(store, data))
        )
    manifest = make_manifest(entries)
    if manifest.hash != skill.hash:
        raise SkillChangedError(
            f"skill {skill.name!r} at {skill.root} changed on disk since it was loaded "
            f"(hash {skill.hash[:12]}... is now {manifest.hash[:12]}...); reload it"
        )
    return manifest


def _read_tree(root: str) -> tuple[list[TreeFile], list[Problem], list[bytes | OSError]]:
    """:func:`walk_tree` and the bytes of every file it lists (or why one could not be
    read), in the walk's order; nothing read when the walk found a problem."""
    files, problems = walk_tree(root)
    if problems:
        return files, problems, []
    contents: list[bytes | OSError] = []
    for f in files:
        try:
            contents.append(read_file(f.path))
        except OSError as e:
            contents.append(e)
            break  # the first unreadable file is the error
    return files, problems, contents


async def read_manifest_file(manifest: SkillManifest, path: str, get_blob: GetBlob) -> bytes:
    """The bytes of ``path`` in the snapshot, checked against the manifest's sha256."""
    entry = next((e for e in manifest.entries if e.path == path), None)
    if entry is None:
        raise ManifestError(f"the skill snapshot has no file {path!r}")
    data = await get_blob(entry.sha256)
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise ManifestError(f"blob for {path!r} does not match its sha256 {entry.sha256}")
    return data


async def skill_from_manifest(
    manifest: SkillManifest,
    get_blob: GetBlob,
    *,
    tier: Tier,
    source: str,
    strict: bool = True,
) -> Skill:
    """Rebuild a :class:`Skill` from a snapshot alone (no filesystem).

    Verifies the manifest against its hash, then parses the ``SKILL.md`` blob; the
    name/directory rule is skipped (a snapshot has no directory). ``root`` and
    ``location`` are ``None``.
    """
    if hash_manifest(manifest.entries) != manifest.hash:
        raise ManifestError(f"the manifest's entries do not hash to {manifest.hash}; it is damaged")
    names = {e.path for e in manifest.entries}
    rel = next((n for n in SKILL_MD_NAMES if n in names), None)
    if rel is None:
        raise ManifestError("the skill snapshot has no SKILL.md")
    data = await read_manifest_file(manifest, rel, get_blob)
    parsed = parse_skill_md(
        data, path=f"snapshot:{manifest.hash[:12]}/{rel}", dir_name=None, strict=strict
    )
    return parsed.skill(hash=manifest.hash, tier=tier, source=source)


async def _put(store: BlobStore, data: bytes) -> str:
    digest = await store.put_blob(data)
    if digest != hashlib.sha256(data).hexdigest():
        raise ManifestError(
            f"the blob store returned digest {digest} that is not the sha256 of the data"
        )
    return digest
