"""Writing output files: whole or not at all.

Every file skillog writes as output (exports, checkpoints, reports, keys, signatures,
configuration, export state) goes through :func:`output_file`. The bytes go to a
temporary file in the target's directory, are fsynced, and the file is renamed into
place only when complete; on any failure the temporary file is removed. A full disk, a
crash or an interrupt therefore leaves the old file or none, never a partial or empty
one. ``-`` is standard output; a path naming something that is not a regular file
(``/dev/full``, a FIFO, a terminal) is written directly, as it cannot be renamed over.
Either way an :class:`OSError` comes out as an :class:`OutputError` whose message says
what failed, where, and what to do. A SIGKILL skips the cleanup: the temporary file is
``flock``ed while it is written, so :func:`remove_stale_temporaries` can tell a dead
writer's leftover (the kernel dropped the lock) from a file being written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ._errors import EventLogError


class OutputError(EventLogError):
    """An output file could not be written; nothing partial was left in its place."""


_ADVICE = {
    errno.ENOSPC: "no space left on device: free space or choose another {where}",
    errno.EDQUOT: "disk quota exceeded: free space or choose another {where}",
    errno.EFBIG: "file too large for that file system: choose another {where}",
    errno.EACCES: "permission denied: choose a writable {where}",
    errno.EPERM: "operation not permitted: choose a writable {where}",
    errno.EROFS: "read-only file system: choose another {where}",
    errno.ENOENT: "no such directory: create it or choose another {where}",
    errno.ENOTDIR: "a parent is not a directory: choose another {where}",
    errno.EISDIR: "is a directory: name a file",
    errno.EIO: "input/output error on the device: check the disk or choose another {where}",
    errno.EADDRINUSE: "address already in use: stop what listens there or choose another",
    errno.EADDRNOTAVAIL: "address not available on this host: choose another",
}


def os_error_message(e: OSError, *, where: str = "path") -> str:
    """What ``e`` means and what to do about it, in one line (``where`` names what the
    user can change, e.g. ``--out``)."""
    advice = _ADVICE.get(e.errno or 0)
    if advice is None:
        return f"{e.strerror or e}: check the {where}"
    return advice.format(where=where)


def _umask() -> int:
    """The process's umask, read without changing it where the kernel says it."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _direct(path: Path) -> bool:
    """Whether ``path`` exists and is not a regular file (a device, FIFO or socket)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def output_file(
    path: str | os.PathLike[str],
    *,
    what: str = "output file",
    option: str = "path",
    mode: int = 0o644,
    exclusive: bool = False,
) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content to; the content replaces ``path``
    only if the ``with`` block completes (see the module docstring).

    ``what`` and ``option`` word the error (``"export file"``, ``"--out"``); ``mode``
    (less the umask) is the new file's; ``exclusive`` refuses to replace an existing
    file. Raises :class:`OutputError`; other exceptions of the block pass unchanged
    (and nothing is written)."""
    if os.fspath(path) == "-":
        try:
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            advice = os_error_message(e, where="destination")
            raise OutputError(f"{what} (standard output): cannot write: {advice}") from e
        return
    target = Path(path)
    fail = f"{what} {target}: cannot write"
    if _direct(target):
        if exclusive:
            raise OutputError(f"{what} {target}: already exists; choose a new file name")
        try:
            with open(target, "wb") as f:
                yield f
        except OSError as e:
            raise OutputError(f"{fail}: {os_error_message(e, where=option)}") from e
        return
    # Through a symlink (a dotfiles-managed config, say) to the file it names: replacing
    # the link itself would cut it.
    real = target.resolve() if target.is_symlink() else target
    try:
        fd, tmp = _temporary(real)
    except OSError as e:
        raise OutputError(f"{fail}: {os_error_message(e, where=option)}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode & ~_umask())
            yield f
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, real)  # fails if the target exists, even if it just appeared
        else:
            os.replace(tmp, real)
        _sync_directory(real.parent)
    except FileExistsError as e:
        raise OutputError(
            f"{what} {target}: already exists; refusing to replace it - choose a new file name"
        ) from e
    except OSError as e:
        raise OutputError(f"{fail}: {os_error_message(e, where=option)}") from e
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # gone already after a rename; after a link it is the extra name


def _temporary(real: Path) -> tuple[int, str]:
    """A new temporary file beside ``real``, locked (``flock``) for as long as this
    process has it open: the kernel drops the lock when the process dies, even by
    SIGKILL, which is how :func:`remove_stale_temporaries` tells a leftover from a
    file being written."""
    while True:
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name[:64]}.", suffix=".tmp")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            return fd, tmp  # a file system without locks: no cleaner can lock it either
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass  # a cleaner took it for a leftover between mkstemp and flock: again
        os.close(fd)


def remove_stale_temporaries(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Remove the temporary files :func:`output_file` left beside ``path`` when a
    process writing it died (SIGKILL, power loss): ``.NAME.XXXXXXXX.tmp`` files that no
    live process holds locked. Returns the names removed; a file still being written
    (locked) is left alone."""
    real = Path(path)
    real = real.resolve() if real.is_symlink() else real
    pattern = re.compile(rf"\.{re.escape(real.name[:64])}\.[A-Za-z0-9_]{{8}}\.tmp")
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(real.parent or ".") if pattern.fullmatch(n)]
    except OSError:
        return ()
    for name in sorted(names):
        candidate = real.parent / name
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(candidate).st_ino == os.fstat(fd).st_ino:
                os.unlink(candidate)
                removed.append(str(candidate))
        except OSError:
            continue  # locked: a live writer's
        finally:
            os.close(fd)
    return tuple(removed)


def write_file(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    what: str = "output file",
    option: str = "path",
    mode: int = 0o644,
    exclusive: bool = False,
) -> None:
    """Write ``data`` as the whole content of ``path`` through :func:`output_file`."""
    with output_file(path, what=what, option=option, mode=mode, exclusive=exclusive) as f:
        f.write(data)


def _sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every file system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
