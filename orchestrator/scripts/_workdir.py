"""Private, content-addressed copies of skills for scripts to run from.

A skill's pinned snapshot (its files' bytes, from the blob store) is written once per
hash into a cache directory as ``<cache>/<skill hash>``. Any number of tasks, sessions
and processes may ask for the same hash at once: each writes into its own staging
directory (``tempfile.mkdtemp`` in the cache, so on the same filesystem), checks the
copy against the manifest, and renames it into place. ``rename`` of a directory onto an
existing non-empty one fails, so exactly one writer wins; the others find the winner's
copy, verify it and use it. A copy that fails verification (tampered with, or left
half-written by a tool that is not this one) is never used.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from eventlog import SkillogError

Files = Mapping[str, tuple[bool, bytes]]
"""Relative POSIX path -> (executable, bytes)."""


class WorkdirError(SkillogError):
    """A skill's private copy could not be made or is not what its manifest says."""


def _write(root: Path, files: Files) -> None:
    for rel, (executable, data) in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o555 if executable else 0o444)


def _matches(root: Path, files: Files) -> bool:
    """Whether ``root`` holds exactly ``files`` (names, bytes, executable bits)."""
    try:
        found = {
            str(p.relative_to(root).as_posix())
            for p in root.rglob("*")
            if p.is_file() or p.is_symlink()
        }
        if found != set(files):
            return False
        for rel, (executable, data) in files.items():
            path = root / rel
            if path.is_symlink() or bool(path.stat().st_mode & 0o100) != executable:
                return False
            if hashlib.sha256(path.read_bytes()).digest() != hashlib.sha256(data).digest():
                return False
    except OSError:
        return False
    return True


def _remove(path: Path) -> None:
    # Read-only files in writable directories: rmtree copes; the directories themselves
    # keep their 0o755 so it can.
    shutil.rmtree(path, ignore_errors=True)


def materialize(cache: str | os.PathLike[str], digest: str, files: Files) -> str:
    """The path of a verified private copy of ``files`` under ``cache``, named by the
    skill's ``digest``; made atomically if it is not there yet (blocking I/O)."""
    if not digest or "/" in digest or digest.startswith("."):
        raise WorkdirError(f"not a skill hash: {digest!r}")
    cache = Path(cache)
    final = cache / digest
    if final.is_dir() and _matches(final, files):
        return str(final)
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest[:16]}.", suffix=".partial", dir=cache))
    try:
        staging.chmod(0o755)
        _write(staging, files)
        try:
            os.rename(staging, final)
            return str(final)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise WorkdirError(f"could not place the copy of skill {digest}: {e}") from e
        # Another writer won the race: use its copy if it is right, else replace it.
        if _matches(final, files):
            return str(final)
        stale = Path(tempfile.mkdtemp(prefix=f".{digest[:16]}.", suffix=".stale", dir=cache))
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            os.rename(final, stale / "old")
        _remove(stale)
        with contextlib.suppress(OSError):  # a third writer placed one: verified below
            os.rename(staging, final)
        if _matches(final, files):
            return str(final)
        raise WorkdirError(f"the private copy of skill {digest} at {final} keeps changing")
    except OSError as e:
        raise WorkdirError(f"could not write the private copy of skill {digest}: {e}") from e
    finally:
        _remove(staging)
