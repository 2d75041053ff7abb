"""The skill hash: one sha256 over a skill's files, the same on every machine.

Definition (``docs/skill-hash.md``): for every file, sorted by the bytes of its
relative POSIX path, the record ``<mode> SP <sha256 hex of its bytes> SP <path> NUL``
where ``<mode>`` is ``100755`` if the owner execute bit is set and ``100644`` otherwise;
the skill hash is the lowercase hex sha256 of the records concatenated. Paths never hold
a NUL, so the records cannot be confused. Nothing else enters: not mtimes, not the
absolute location, not the order files were created in.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Iterable

from ._errors import ManifestError, Problem, SkillTreeError
from ._model import ManifestEntry, SkillManifest
from ._tree import TreeFile, sha256_file, tree_problems, walk_tree

_HEX64 = re.compile(r"[0-9a-f]{64}")
SKILL_MD_NAMES = ("SKILL.md", "skill.md")


def check_relpath(path: str) -> None:
    """Raise :class:`ManifestError` unless ``path`` is a clean relative POSIX path."""
    parts = path.split("/")
    if not path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise ManifestError(
            f"manifest path {path!r} is not a clean relative path (no leading '/', no empty, "
            "'.' or '..' segments, no NUL); the manifest is damaged"
        )


def hash_manifest(entries: Iterable[ManifestEntry]) -> str:
    """The skill hash over ``entries`` (any order); validates every entry.

    Pure: replay recomputes a recorded hash from the log's manifest alone.
    """
    records: list[tuple[bytes, bytes]] = []
    for e in entries:
        check_relpath(e.path)
        if not _HEX64.fullmatch(e.sha256):
            raise ManifestError(
                f"manifest entry {e.path!r}: sha256 {e.sha256!r} is not 64 lowercase hex digits"
            )
        path = e.path.encode()
        mode = b"100755" if e.executable else b"100644"
        records.append((path, b"%s %s %s\0" % (mode, e.sha256.encode(), path)))
    records.sort()
    for (a, _), (b, _) in itertools.pairwise(records):
        if a == b:
            raise ManifestError(f"manifest lists {a.decode()!r} twice; the manifest is damaged")
    digest = hashlib.sha256()
    for _, record in records:
        digest.update(record)
    return digest.hexdigest()


def make_manifest(entries: Iterable[ManifestEntry]) -> SkillManifest:
    """A :class:`SkillManifest` with entries sorted by path bytes and its hash."""
    ordered = tuple(sorted(entries, key=lambda e: e.path.encode()))
    return SkillManifest(entries=ordered, hash=hash_manifest(ordered))


def hash_files(
    root: str,
    files: list[TreeFile],
    *,
    keep: Iterable[str] = SKILL_MD_NAMES,
    keep_max: int = 1024 * 1024,
) -> tuple[SkillManifest, dict[str, bytes], list[Problem]]:
    """Hash the walked ``files``; return the manifest, the kept files' bytes, problems.

    ``keep`` names relative paths whose bytes are returned too (the ``SKILL.md`` the
    parser needs, if at most ``keep_max`` bytes), so each file is read exactly once.
    """
    wanted = set(keep)
    kept: dict[str, bytes] = {}
    entries: list[ManifestEntry] = []
    failed: list[tuple[str, OSError]] = []
    for f in files:
        try:
            digest, data = sha256_file(f.path, f.size, f.rel in wanted and f.size <= keep_max)
        except OSError as e:
            failed.append((f.rel, e))
            continue
        if data is not None:
            kept[f.rel] = data
        entries.append(ManifestEntry(path=f.rel, executable=f.executable, sha256=digest))
    manifest = SkillManifest(entries=tuple(entries), hash=hash_manifest(entries))
    return manifest, kept, tree_problems(root, failed)


def manifest_of(root: str | os.PathLike[str]) -> SkillManifest:
    """The manifest of the skill directory ``root``; raises :class:`SkillTreeError`."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise SkillTreeError(f"{root} is not a directory; give the skill's folder")
    files, problems = walk_tree(root)
    manifest, _, more = hash_files(root, files, keep=())
    if problems or more:
        raise SkillTreeError(
            f"cannot hash the skill at {root}:\n  " + "\n  ".join(str(p) for p in problems + more)
        )
    return manifest


def skill_hash(root: str | os.PathLike[str]) -> str:
    """The skill hash of the directory ``root`` (see the module docstring)."""
    return manifest_of(root).hash
