"""Walk a skill directory and read its files: the one place that touches a skill tree.

Hashing, snapshots, the index's stat fingerprints, materialize and install all use
this walk, so they agree on what "the files of a skill" are:

- regular files, at any depth (bounded), named by their relative POSIX path;
- a symlink to a file inside the root counts as that file's bytes at the link's path
  (the way a copy would materialize it); a symlink leaving the root, a dangling one and a
  symlink to a directory are refused with the reason;
- FIFOs, sockets and devices are refused (reading a FIFO would hang);
- empty directories are not part of a skill (they have no bytes; git drops them too);
- ``.git`` (a skill that is itself a checkout) is version-control state, not content.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable
from typing import NamedTuple

from ._errors import Problem

MAX_FILES = 10_000
MAX_TOTAL_BYTES = 256 * 1024 * 1024
MAX_TREE_DEPTH = 32
SKIPPED_NAMES = frozenset({".git"})
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
_BIG = 4 * 1024 * 1024


class TreeFile(NamedTuple):
    """One file of a skill tree, with the stat fields the index fingerprints."""

    rel: str  # relative POSIX path, valid UTF-8
    path: str  # absolute path to read (the symlink's target for in-root links)
    executable: bool  # owner execute bit, as git records it
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int


class TreeDir(NamedTuple):
    """One directory of a skill tree ("" is the root), for the index's fingerprint."""

    rel: str
    mtime_ns: int
    ctime_ns: int
    ino: int


def walk_tree(root: str, dirs: list[TreeDir] | None = None) -> tuple[list[TreeFile], list[Problem]]:
    """List the files of the skill at ``root`` (absolute); never raises for bad entries.

    Returns the files sorted by relative path bytes, and a problem for every entry that
    makes the tree unusable (escaping or dangling symlink, special file, bounds). If
    ``dirs`` is given, every directory walked is appended to it with its stat.
    """
    if dirs is not None:
        with contextlib.suppress(OSError):  # walked below, so reported there
            dirs.append(_dir("", os.stat(root)))
    real_root = ""  # resolved on the first symlink: most trees have none
    files: list[TreeFile] = []
    problems: list[Problem] = []
    total = 0
    stack: list[tuple[str, str, int]] = [(root, "", 0)]
    while stack:
        directory, prefix, depth = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as e:
            problems.append(_problem(root, prefix or ".", "tree-unreadable", _os_reason(e)))
            continue
        for entry in entries:
            rel = prefix + entry.name
            if not entry.name.isascii() and not _utf8(entry.name):
                problems.append(
                    _problem(
                        root, repr(rel), "tree-name", "the file name is not valid UTF-8; rename it"
                    )
                )
                continue
            try:
                if entry.is_symlink():
                    real_root = real_root or os.path.realpath(root)
                    item = _symlink(root, real_root, entry.path, rel, problems)
                    if item is not None:
                        files.append(item)
                        total += item.size
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in SKIPPED_NAMES:
                        continue
                    if depth + 1 >= MAX_TREE_DEPTH:
                        problems.append(
                            _problem(
                                root,
                                rel,
                                "tree-depth",
                                f"nested deeper than {MAX_TREE_DEPTH} levels",
                            )
                        )
                        continue
                    if dirs is not None:
                        dirs.append(_dir(rel, entry.stat(follow_symlinks=False)))
                    stack.append((entry.path, rel + "/", depth + 1))
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError as e:
                problems.append(_problem(root, rel, "tree-unreadable", _os_reason(e)))
                continue
            if not stat.S_ISREG(st.st_mode):
                problems.append(
                    _problem(
                        root,
                        rel,
                        "tree-special-file",
                        "is a FIFO, socket or device, not a regular file; remove it from the skill",
                    )
                )
                continue
            files.append(_file(rel, entry.path, st))
            total += st.st_size
        if len(files) > MAX_FILES:
            problems.append(
                _problem(
                    root, ".", "tree-too-many-files", f"the skill has more than {MAX_FILES} files"
                )
            )
            break
    if total > MAX_TOTAL_BYTES:
        problems.append(
            _problem(
                root,
                ".",
                "tree-too-large",
                f"the skill's files total {total} bytes; the limit is {MAX_TOTAL_BYTES}",
            )
        )
    files.sort(key=lambda f: f.rel.encode())
    return files, problems


def read_file(path: str) -> bytes:
    """The bytes of a regular file, refusing anything that is not one (without blocking)."""
    fd = os.open(path, _OPEN_FLAGS)
    with open(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        return f.read()


def sha256_file(path: str, size: int, keep: bool = False) -> tuple[str, bytes | None]:
    """``(hex sha256, bytes if keep)`` of a regular file; large files are streamed."""
    if size < _BIG or keep:
        data = read_file(path)
        return hashlib.sha256(data).hexdigest(), data if keep else None
    fd = os.open(path, _OPEN_FLAGS)
    with open(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        return hashlib.file_digest(f, "sha256").hexdigest(), None


def tree_problems(root: str, errors: Iterable[tuple[str, OSError]]) -> list[Problem]:
    """Problems for files that failed to read during hashing."""
    return [_problem(root, rel, "tree-unreadable", _os_reason(e)) for rel, e in errors]


def _symlink(
    root: str, real_root: str, link: str, rel: str, problems: list[Problem]
) -> TreeFile | None:
    target = os.path.realpath(link)
    if os.path.commonpath([real_root, target]) != real_root:
        problems.append(
            _problem(
                root,
                rel,
                "symlink-escape",
                f"is a symlink to {target}, outside the skill root; "
                "a skill may only link to its own files - copy the file in instead",
            )
        )
        return None
    try:
        st = os.stat(target)
    except OSError:
        problems.append(
            _problem(root, rel, "symlink-dangling", "is a symlink to nothing; remove it")
        )
        return None
    if not stat.S_ISREG(st.st_mode):
        problems.append(
            _problem(
                root,
                rel,
                "symlink-not-file",
                "is a symlink to a directory or special file; only links to files are "
                "followed - replace it with a real directory",
            )
        )
        return None
    return _file(rel, target, st)


def _file(rel: str, path: str, st: os.stat_result) -> TreeFile:
    return TreeFile(
        rel,
        path,
        bool(st.st_mode & stat.S_IXUSR),
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
    )


def _dir(rel: str, st: os.stat_result) -> TreeDir:
    return TreeDir(rel, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


# The stat stamps the index fingerprints: one per directory, then one per file.
_DIR_STAMP = b"%s/\0%d %d %d\0"  # rel, mtime_ns, ctime_ns, inode
_FILE_STAMP = b"%s\0%d %d %d %d %d\0"  # rel, size, mtime_ns, ctime_ns, inode, executable


def stamps(files: Iterable[TreeFile], dirs: Iterable[TreeDir]) -> list[bytes]:
    """The stat stamps of a walked tree (directories first, then files)."""
    out = [_DIR_STAMP % (d.rel.encode(), d.mtime_ns, d.ctime_ns, d.ino) for d in dirs]
    out += [
        _FILE_STAMP % (f.rel.encode(), f.size, f.mtime_ns, f.ctime_ns, f.ino, f.executable)
        for f in files
    ]
    return out


def stat_known(root: str, dir_rels: list[str], file_rels: list[str]) -> list[bytes] | None:
    """Re-stat a tree's known directories and files, without listing any directory.

    Returns their :func:`stamps` as a fresh walk would give them for an unchanged tree,
    or ``None`` if any is gone. A directory's mtime changes whenever an entry is added,
    removed or renamed in it, so equal directory and file stamps mean an equal tree.
    This loop is the whole cost of a warm start, so it builds the stamps straight from
    ``os.stat`` (no TreeFile per file).
    """
    base = root.rstrip("/") + "/"
    stat_, lstat, dir_stamp, file_stamp = os.stat, os.lstat, _DIR_STAMP, _FILE_STAMP
    out: list[bytes] = []
    try:
        for rel in dir_rels:
            st = stat_(root) if rel == "" else lstat(base + rel)
            out.append(dir_stamp % (rel.encode(), st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        for rel in file_rels:
            st = stat_(base + rel)
            exe = st.st_mode & stat.S_IXUSR != 0
            out.append(
                file_stamp
                % (rel.encode(), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, exe)
            )
    except OSError:
        return None
    return out


def _utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _problem(root: str, rel: str, rule: str, message: str) -> Problem:
    return Problem(
        file=os.path.join(root, rel) if rel != "." else root,
        field="file",
        rule=rule,
        message=message,
    )


def _os_reason(e: OSError) -> str:
    return f"cannot be read ({e.strerror or e}); check its permissions"
