"""Extract a skill ZIP safely: the archive's root must be the skill folder.

Refused, with the entry named: absolute paths and drive letters, ``..`` segments and
backslashes (zip-slip), symlink and other special entries, more entries than a skill
may hold, any file over ``MAX_FILE_BYTES`` uncompressed, a total over the skill size
limit, and compression ratios over ``MAX_RATIO`` (zip bombs). Sizes are enforced on
the bytes actually inflated, not on the header's claims.
"""

from __future__ import annotations

import os
import stat
import zipfile

from ._errors import InstallError
from ._tree import MAX_FILES, MAX_TOTAL_BYTES

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_RATIO = 200
_CHUNK = 1024 * 1024


def extract_skill_zip(archive: str, dest: str) -> str:
    """Extract ``archive`` under the empty directory ``dest``; return the skill folder."""
    try:
        with zipfile.ZipFile(archive) as z:
            infos = [i for i in z.infolist() if not i.filename.startswith("__MACOSX/")]
            tops = {_check_name(archive, i.filename).split("/")[0] for i in infos}
            if len(tops) != 1 or not any(
                "/" in i.filename.rstrip("/") or i.is_dir() for i in infos
            ):
                raise InstallError(
                    f"{archive}: the ZIP's root must be the skill folder (<name>/SKILL.md); "
                    f"found top-level entries {sorted(tops)[:5]}"
                )
            if len(infos) > MAX_FILES:
                raise InstallError(f"{archive}: more than {MAX_FILES} entries")
            total = 0
            for info in infos:
                total = _extract(z, archive, info, dest, total)
    except zipfile.BadZipFile as e:
        raise InstallError(f"{archive}: not a valid ZIP file ({e})") from e
    except OSError as e:
        raise InstallError(f"{archive}: cannot extract ({e})") from e
    return os.path.join(dest, tops.pop())


def _check_name(archive: str, name: str) -> str:
    parts = name.rstrip("/").split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or (len(name) > 1 and name[1] == ":")
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise InstallError(
            f"{archive}: entry {name!r} is an absolute path or climbs out of the folder "
            "(zip-slip); refusing the archive"
        )
    return name


def _extract(z: zipfile.ZipFile, archive: str, info: zipfile.ZipInfo, dest: str, total: int) -> int:
    name = info.filename
    target = os.path.join(dest, *name.rstrip("/").split("/"))
    if info.is_dir():
        os.makedirs(target, exist_ok=True)
        return total
    mode = info.external_attr >> 16
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: archivers that record no type
        kind = "a symlink" if stat.S_ISLNK(mode) else "a special file"
        raise InstallError(f"{archive}: entry {name!r} is {kind}; skill archives hold files only")
    if info.file_size > MAX_FILE_BYTES:
        raise InstallError(
            f"{archive}: entry {name!r} is {info.file_size} bytes uncompressed "
            f"(limit {MAX_FILE_BYTES})"
        )
    os.makedirs(os.path.dirname(target), exist_ok=True)
    written = 0
    with z.open(info) as src, open(target, "xb") as out:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            total += len(chunk)
            if written > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                raise InstallError(
                    f"{archive}: entry {name!r} inflates past the size limits (zip bomb?)"
                )
            if written > _CHUNK and written > MAX_RATIO * max(info.compress_size, 1):
                raise InstallError(
                    f"{archive}: entry {name!r} compresses more than {MAX_RATIO}:1 (zip bomb?)"
                )
            out.write(chunk)
    os.chmod(target, 0o755 if mode & stat.S_IXUSR else 0o644)
    return total
