"""Path safety: the one gate between a model-supplied path and a skill directory.

Every path that reaches ``skills.read`` or ``skills.run_script`` passes through
:func:`resolve_in_root` (or :func:`read_skill_file`, which adds a race-free open). The
gate has two halves, as in seed 003: a pure *pre-check* of the string
(:func:`check_relative_path`) and a *post-check* on the filesystem (symlinks resolved, the
result contained in the resolved root, of the expected kind).

The functions here do blocking file I/O; async callers run them through
``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import errno
import os
import re
import reprlib
import stat
import unicodedata
from pathlib import Path
from typing import Literal

from eventlog import SkillogError

PathKind = Literal["file", "dir"]

#: Longest accepted path, in UTF-8 bytes. Skill files need far less than PATH_MAX (4096);
#: a short limit keeps hostile strings out of messages, logs and syscalls.
MAX_PATH_BYTES = 1024
#: Longest accepted path segment, in UTF-8 bytes (NAME_MAX on Linux).
MAX_SEGMENT_BYTES = 255

_HINT = "use a path relative to the skill root such as references/guide.md"
_DRIVE = re.compile(r"[A-Za-z]:")
# Control (Cc), format (Cf: zero-width and bidi overrides), line/paragraph separators:
# invisible or reordering characters that make a path read differently from what it is.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_SHOWN_CHARS = 80


class PathRefusedError(SkillogError):
    """A path was refused by the path gate.

    ``path`` is the offending input (possibly not a string), ``rule`` a short stable code
    for the rule it broke (for events and metrics): ``type``, ``empty``, ``too_long``,
    ``nul``, ``encoding``, ``control``, ``backslash``, ``absolute``, ``drive``, ``home``,
    ``unicode``, ``empty_segment``, ``dot_segment``, ``parent``, ``root``, ``escape``,
    ``missing``, ``unresolvable``, ``kind``, ``changed``, ``too_large``, ``outside_scripts``.
    """

    def __init__(self, path: object, rule: str, detail: str, hint: str = _HINT) -> None:
        self.path = path
        self.rule = rule
        super().__init__(f"refused path {show_path(path)}: {detail}; {hint}")


def show_path(path: object) -> str:
    """Render untrusted input safely for a message: escaped, and cut at 80 characters."""
    if isinstance(path, str) and len(path) > _SHOWN_CHARS:
        # Cut before repr: a hostile string may be megabytes long.
        return f"{path[:_SHOWN_CHARS]!r}… ({len(path)} characters)"
    return reprlib.repr(path) if not isinstance(path, str) else repr(path)


def check_relative_path(rel: object) -> tuple[str, ...]:
    """Pre-check ``rel`` as a relative POSIX path; return its segments.

    Pure (no filesystem access). ``"."`` alone means the root and yields ``()``. Refuses,
    with :class:`PathRefusedError`: non-strings, empty strings, paths over
    :data:`MAX_PATH_BYTES` or with a segment over :data:`MAX_SEGMENT_BYTES`, NUL bytes,
    unpaired surrogates, control/format/separator characters, backslashes, absolute
    paths, drive letters (``C:``), a leading ``~``, any string that changes under Unicode
    NFKC normalization (full-width dots and slashes, non-breaking spaces, ligatures: text
    that could alias another path on a normalizing filesystem or to a reader), and empty,
    ``.`` or ``..`` segments.
    """
    if not isinstance(rel, str):
        raise PathRefusedError(rel, "type", f"expected a string, got {type(rel).__name__}")
    if rel == "":
        raise PathRefusedError(rel, "empty", "the path is empty")
    # Cheap length bound first, so nothing below runs over a hostile megabyte string.
    if len(rel) > MAX_PATH_BYTES:
        raise PathRefusedError(rel, "too_long", f"longer than {MAX_PATH_BYTES} bytes")
    if "\x00" in rel:
        raise PathRefusedError(rel, "nul", "contains a NUL byte")
    try:
        encoded = rel.encode("utf-8")
    except UnicodeEncodeError:
        raise PathRefusedError(rel, "encoding", "is not valid UTF-8 text") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise PathRefusedError(rel, "too_long", f"longer than {MAX_PATH_BYTES} bytes")
    # Printable ASCII (the common path) has no invisible character and is NFKC-stable.
    plain = rel.isascii() and rel.isprintable()
    for char in () if plain else rel:
        if unicodedata.category(char) in _INVISIBLE_CATEGORIES:
            raise PathRefusedError(
                rel, "control", f"contains the invisible character U+{ord(char):04X}"
            )
    if "\\" in rel:
        raise PathRefusedError(rel, "backslash", "contains a backslash; use / between segments")
    if rel.startswith("/"):
        raise PathRefusedError(rel, "absolute", "is an absolute path")
    if _DRIVE.match(rel):
        raise PathRefusedError(rel, "drive", "starts with a drive letter")
    if rel.startswith("~"):
        raise PathRefusedError(rel, "home", "starts with ~ (home directories are not reachable)")
    if not plain and unicodedata.normalize("NFKC", rel) != rel:
        raise PathRefusedError(
            rel,
            "unicode",
            "changes under Unicode NFKC normalization (look-alike or compatibility characters)",
        )
    if rel == ".":
        return ()
    segments = tuple(rel.split("/"))
    for segment in segments:
        if segment == "":
            raise PathRefusedError(
                rel, "empty_segment", "has an empty segment (// or a trailing /)"
            )
        if segment == ".":
            raise PathRefusedError(rel, "dot_segment", "has a '.' segment; remove the ./ parts")
        if segment == "..":
            raise PathRefusedError(rel, "parent", "has a '..' segment (leaving the skill root)")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise PathRefusedError(
                rel, "too_long", f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"
            )
    return segments


def is_inside(path: str, root: str) -> bool:
    """Whether resolved absolute ``path`` is ``root`` or below it (pure string test)."""
    if path == root:
        return True
    prefix = root if root.endswith("/") else root + "/"
    return path.startswith(prefix)


def _describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file or directory"


def _check_kind(rel: str, mode: int, kind: PathKind) -> None:
    ok = stat.S_ISREG(mode) if kind == "file" else stat.S_ISDIR(mode)
    if not ok:
        wanted = "a regular file" if kind == "file" else "a directory"
        raise PathRefusedError(rel, "kind", f"is {_describe(mode)}, expected {wanted}")


def real_root(root: str | os.PathLike[str]) -> str:
    """Resolve the skill root (trusted runtime configuration) to an existing directory."""
    resolved = os.path.realpath(root)
    if not os.path.isdir(resolved):
        raise PathRefusedError(
            os.fspath(root),
            "root",
            "the skill root is not an existing directory",
            "check the skill's location (was it moved or deleted?)",
        )
    return resolved


def resolve_in_root(root: str | os.PathLike[str], rel: object, *, kind: PathKind = "file") -> Path:
    """Resolve ``rel`` under ``root`` and return the real (symlink-free) absolute path.

    Promises: the returned path passed :func:`check_relative_path`, lies inside the real
    path of ``root`` after every symlink is resolved, exists, and is a regular file
    (``kind="file"``) or a directory (``kind="dir"``) — never a FIFO, socket or device.
    Symlinks that stay inside the root are followed; any that leave it are refused.
    Raises :class:`PathRefusedError` naming the path, the rule and what to do.

    The answer holds at the moment of the check; to read a file without a race between
    check and open use :func:`read_skill_file`.
    """
    segments = check_relative_path(rel)
    assert isinstance(rel, str)  # check_relative_path refused anything else
    root_real = real_root(root)
    # Non-strict first: a symlink pointing outside is an escape even when its target
    # does not exist, and must not be reported as merely "missing".
    real = os.path.realpath(os.path.join(root_real, *segments))
    if not is_inside(real, root_real):
        raise PathRefusedError(rel, "escape", "resolves (through a symlink) outside the skill root")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise PathRefusedError(rel, "missing", "does not exist in the skill") from None
    except OSError as e:
        raise PathRefusedError(
            rel, "unresolvable", f"cannot be resolved ({e.strerror or e})"
        ) from None
    _check_kind(rel, st.st_mode, kind)
    return Path(real)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO swapped in after the check must not block the thread.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_READ_CHUNK = 1 << 16


def _open_beneath(root_real: str, parts: tuple[str, ...], rel: str) -> int:
    """Open ``root_real/parts`` one segment at a time, refusing symlinks at every step.

    ``parts`` is already symlink-free (it came from realpath), so a symlink met here was
    swapped in after the check: that is refused rather than followed.
    """
    fd = os.open(root_real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise PathRefusedError(
                rel, "changed", "changed on disk while it was being opened", "try again"
            ) from None
        raise PathRefusedError(
            rel, "unresolvable", f"cannot be opened ({e.strerror or e})"
        ) from None
    finally:
        os.close(fd)
    return file_fd


def read_skill_file(root: str | os.PathLike[str], rel: object, *, max_bytes: int) -> bytes:
    """Read the regular file ``rel`` under ``root``, at most ``max_bytes`` bytes.

    Promises everything :func:`resolve_in_root` does, for the bytes actually returned:
    the file is opened segment by segment from the root with ``O_NOFOLLOW`` and checked
    with ``fstat`` on the open descriptor, so a symlink or FIFO swapped in after the check
    is refused instead of followed. A file larger than ``max_bytes`` (or one that grows
    past it while being read) is refused with rule ``too_large``; nothing partial is
    returned.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
    real = resolve_in_root(root, rel, kind="file")
    assert isinstance(rel, str)
    root_real = real_root(root)
    parts = real.relative_to(root_real).parts
    fd = _open_beneath(root_real, parts, rel)
    with os.fdopen(fd, "rb", buffering=0) as f:
        _check_kind(rel, os.fstat(fd).st_mode, "file")
        too_large = PathRefusedError(
            rel,
            "too_large",
            f"is larger than the limit of {max_bytes} bytes",
            "read a smaller file, or raise the read size limit",
        )
        if os.fstat(fd).st_size > max_bytes:
            raise too_large
        chunks: list[bytes] = []
        total = 0
        # Read one byte past the limit: a file that grew since fstat is caught too.
        while total <= max_bytes:
            chunk = f.read(min(_READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise too_large
        return b"".join(chunks)
