"""Install, update and remove skills in the install directory, with provenance.

Every operation stages its work in a temporary directory next to the install directory
and publishes it with a rename; the configuration (which records provenance) is saved
last. Any failure - a bad URL, a clone error, an invalid skill, a hostile archive, a
name clash - removes the staging area and leaves the install directory and the
configuration exactly as they were.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from eventlog import os_error_message

from ._archive import extract_skill_zip
from ._config import InstalledSkill, SkillsConfig, save_config
from ._discover import find_skill_dirs, install_dir
from ._errors import InstallError
from ._hash import manifest_of
from ._materialize import copy_skill_tree
from ._model import Skill, Tier
from ._parse import load_skill
from ._tree import MAX_FILES, MAX_TOTAL_BYTES
from ._validate import MAX_NAME, name_problems

GIT_TIMEOUT_S = 300
_STDERR_KEEP = 16 * 1024
# Transports git may use; ``ext::`` (runs commands) and friends are refused.
_GIT_PROTOCOLS = "file:git:http:https:ssh"


def source_kind(source: str) -> str:
    """``folder``, ``zip`` or ``git`` for an install source."""
    if os.path.isdir(source):
        return "folder"
    if source.lower().endswith(".zip") and os.path.isfile(source):
        return "zip"
    if "://" in source or source.startswith("git@") or source.endswith(".git"):
        return "git"
    raise InstallError(
        f"{source!r} is not a folder, a .zip file or a git URL; check the path or URL"
    )


OnConflict = Literal["error", "rename", "replace"]


class NameConflictError(InstallError):
    """A skill of that name is already installed (``on_conflict="error"``): ``name``
    is the name, ``suggestion`` the first free ``NAME-N`` a rename would take."""

    def __init__(self, message: str, name: str, suggestion: str) -> None:
        super().__init__(message)
        self.name, self.suggestion = name, suggestion


def install(
    source: str,
    *,
    config: SkillsConfig,
    config_file: str,
    ref: str | None = None,
    name: str | None = None,
    tier: Tier | None = None,
    clock: Callable[[], int] = time.time_ns,
    progress: Callable[[int], None] | None = None,
    on_conflict: OnConflict = "error",
) -> InstalledSkill:
    """Install the skill at ``source`` (folder, ZIP or git URL) and record provenance.

    ``ref`` selects a git branch or tag. ``name`` picks the skill of that directory
    name in a repository holding several; otherwise the skill is installed under
    ``name`` (its ``SKILL.md`` ``name`` rewritten in the installed copy: seed 003's
    name override). ``on_conflict`` says what a skill of the same name already
    installed gets: ``error`` (:class:`NameConflictError`, naming a free name),
    ``rename`` (installed as that free ``NAME-N``) or ``replace`` (the installed one is
    put back if this install fails). ``tier`` defaults to ``user`` for a local folder
    and ``third-party`` otherwise. ``progress(n)`` is told of each ``n`` more bytes a
    git clone has written. Raises :class:`InstallError` (or
    :class:`SkillValidationError`) and leaves nothing behind on failure.
    """
    kind = source_kind(source)
    origin = os.path.abspath(source) if kind != "git" else source
    if ref is not None and kind != "git":
        raise InstallError("--ref only applies to git sources")
    target_dir = install_dir(config)
    os.makedirs(target_dir, exist_ok=True)
    staging = tempfile.mkdtemp(dir=target_dir, prefix=".staging-")
    try:
        root = _stage(kind, origin, ref, name, staging, progress)
        return _install(
            kind, origin, root, config, config_file, ref, name, tier, clock, staging, on_conflict
        )
    except OSError as e:
        if e.errno in _NO_ROOM:
            where = f"skills.install_dir in the configuration (now {target_dir})"
            raise InstallError(
                f"could not install {origin}: {os_error_message(e, where=where)}"
            ) from e
        # A file that vanished or changed under the copy, an unreadable one.
        raise InstallError(
            f"could not install {origin}: {e}; if the source was being changed, try again"
        ) from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _install(
    kind: str,
    origin: str,
    root: tuple[str, bool],
    config: SkillsConfig,
    config_file: str,
    ref: str | None,
    name: str | None,
    tier: Tier | None,
    clock: Callable[[], int],
    staging: str,
    on_conflict: OnConflict,
) -> InstalledSkill:
    target_dir = install_dir(config)
    skill_root, renamable = root
    strict = not config.lenient
    if renamable:
        # A repository root is named after the repo, not the skill: publish it under
        # the skill's own name (seed 003), then validate exactly what is published.
        peek = load_skill(skill_root, tier=Tier.USER, source="installed", strict=False)
        clean = os.path.join(staging, "clean", peek.name)
        copy_skill_tree(skill_root, clean)
        skill = load_skill(clean, tier=Tier.USER, source="installed", strict=strict)
    else:
        skill = load_skill(skill_root, tier=Tier.USER, source="installed", strict=strict)
        clean = os.path.join(staging, "clean", skill.name)
        copy_skill_tree(skill_root, clean)  # drops .git and anything refused
        if manifest_of(clean).hash != skill.hash:
            raise InstallError(f"{origin} changed while it was being installed; try again")
    if name is not None and skill.name != name:
        clean, skill = _renamed(clean, name, strict)
    if _taken(config, skill.name):
        free = _free_name(config, skill.name)
        if on_conflict == "rename":
            clean, skill = _renamed(clean, free, strict)
        elif on_conflict != "replace":
            raise NameConflictError(
                f"a skill named {skill.name!r} is already installed in {target_dir}; install "
                f"it under another name (--name {free}, or --on-conflict rename), replace it "
                f"(--on-conflict replace), or use `skillog skills update {skill.name}`",
                skill.name,
                free,
            )
    record = InstalledSkill(
        name=skill.name,
        origin=origin,
        kind=kind,
        ref=ref,
        tier=tier or (Tier.USER if kind == "folder" else Tier.THIRD_PARTY),
        installed_at=clock(),
        hash=skill.hash,
    )
    final = os.path.join(target_dir, skill.name)
    kept = tuple(r for r in config.installed if r.name != skill.name)
    backup = tempfile.mkdtemp(dir=target_dir, prefix=".backup-")
    moved = os.path.join(backup, skill.name)
    try:
        if os.path.lexists(final):  # on_conflict="replace": put back if anything fails
            os.replace(final, moved)
        try:
            os.replace(clean, final)
            save_config(config_file, _with(config, installed=(*kept, record)))
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            if os.path.lexists(moved):
                os.replace(moved, final)
            raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)
    return record


def _taken(config: SkillsConfig, name: str) -> bool:
    return name in {r.name for r in config.installed} or os.path.lexists(
        os.path.join(install_dir(config), name)
    )


def _free_name(config: SkillsConfig, name: str) -> str:
    """The first of ``NAME-2``, ``NAME-3``, ... not installed (within the name limit)."""
    n = 2
    while True:
        candidate = f"{name[: MAX_NAME - len(str(n)) - 1]}-{n}"
        if not _taken(config, candidate):
            return candidate
        n += 1


_NAME_LINE = re.compile(rb"^name[ \t]*:.*$", re.MULTILINE)


def _renamed(clean: str, new: str, strict: bool) -> tuple[str, Skill]:
    """The staged copy at ``clean`` published as ``new``: its directory renamed and its
    ``SKILL.md`` ``name`` line rewritten; the result validated like any install."""
    problems = name_problems(new, new)
    if problems:
        raise InstallError(f"--name {new!r}: {'; '.join(m for _, m in problems)}")
    path = os.path.join(clean, "SKILL.md")
    with open(path, "rb") as f:
        text = f.read()
    end = text.find(b"\n---", 3)
    head, found = _NAME_LINE.subn(b"name: " + new.encode(), text[:end], count=1)
    if end < 0 or not found:
        raise InstallError(f"cannot rename: {path} has no top-level name line in its frontmatter")
    with open(path, "wb") as f:
        f.write(head + text[end:])
    target = os.path.join(os.path.dirname(clean), new)
    os.rename(clean, target)
    return target, load_skill(target, tier=Tier.USER, source="installed", strict=strict)


def _replacing(
    name: str,
    config: SkillsConfig,
    config_file: str,
    put: Callable[[SkillsConfig], InstalledSkill],
) -> InstalledSkill:
    """Run ``put`` with the installed skill ``name`` moved aside (and its record out of
    the configuration); put back as it was if ``put`` fails."""
    target_dir = install_dir(config)
    final = os.path.join(target_dir, name)
    backup = tempfile.mkdtemp(dir=target_dir, prefix=".backup-")
    moved = os.path.join(backup, name)
    if os.path.lexists(final):
        os.replace(final, moved)
    rest = _with(config, installed=tuple(r for r in config.installed if r.name != name))
    try:
        return put(rest)
    except BaseException:
        if os.path.lexists(moved):
            shutil.rmtree(final, ignore_errors=True)
            os.replace(moved, final)
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)


def update(
    name: str,
    *,
    config: SkillsConfig,
    config_file: str,
    clock: Callable[[], int] = time.time_ns,
    progress: Callable[[int], None] | None = None,
) -> InstalledSkill:
    """Re-install ``name`` from its recorded origin and ref; the old copy is restored on failure."""
    record = _record(config, name)
    return _replacing(
        name,
        config,
        config_file,
        lambda rest: install(
            record.origin,
            config=rest,
            config_file=config_file,
            ref=record.ref,
            name=name,
            tier=record.tier,
            clock=clock,
            progress=progress,
        ),
    )


def remove(name: str, *, config: SkillsConfig, config_file: str) -> InstalledSkill:
    """Delete the installed skill ``name`` and its record."""
    record = _record(config, name)
    save_config(
        config_file, _with(config, installed=tuple(r for r in config.installed if r.name != name))
    )
    shutil.rmtree(os.path.join(install_dir(config), name), ignore_errors=True)
    return record


def _stage(
    kind: str,
    origin: str,
    ref: str | None,
    name: str | None,
    staging: str,
    progress: Callable[[int], None] | None,
) -> tuple[str, bool]:
    """The directory holding the skill, and whether it may be renamed to the skill's name."""
    if kind == "folder":
        return origin, False
    if kind == "zip":
        return extract_skill_zip(origin, os.path.join(staging, "zip")), False
    repo = os.path.join(staging, "repo")
    _git_clone(origin, ref, repo, progress)
    dirs, _ = find_skill_dirs(repo, max_depth=6, max_dirs=2000)
    if repo in dirs:
        return repo, True
    if name is not None:
        named = [d for d in dirs if os.path.basename(d) == name]
        if named:
            return named[0], False
    if len(dirs) == 1 and name is None:
        return dirs[0], False
    found = ", ".join(sorted(os.path.basename(d) for d in dirs)) or "none"
    raise InstallError(
        f"{origin}: cannot tell which skill to install (skills found: {found}); pass --name"
    )


def _git_clone(
    url: str, ref: str | None, dest: str, progress: Callable[[int], None] | None = None
) -> None:
    """A shallow clone of one branch, bounded: no hooks, submodules or LFS downloads;
    no file over, and no clone much over, the skill size limit; a time limit. The full
    stderr of a failed clone is in the error."""
    if url.startswith("-") or (ref is not None and ref.startswith("-")):
        raise InstallError(f"refusing git URL/ref starting with '-': {url!r} {ref!r}")
    cmd = [
        *_git_limits(),
        "git",
        "-c", "core.hooksPath=/dev/null",
        "-c", "filter.lfs.smudge=", "-c", "filter.lfs.process=", "-c", "filter.lfs.required=false",
        "clone", "--quiet", "--depth", "1", "--no-tags", "--single-branch",
        "--no-recurse-submodules",
    ]  # fmt: skip
    if ref is not None:
        cmd += ["--branch", ref]
    cmd += ["--", url, dest]
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": _GIT_PROTOCOLS,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_LFS_SKIP_SMUDGE": "1",
    }
    where = f"{url}{f' at {ref}' if ref else ''}"
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
            start_new_session=True,
        )  # fmt: skip
    except FileNotFoundError as e:
        raise InstallError("git is not installed; install git or use a folder or ZIP") from e
    with proc:
        problem = _watch_clone(proc, dest, progress)
        stderr = proc.stderr.read() if proc.stderr else b""
    text = stderr.decode("utf-8", "replace").strip()[-_STDERR_KEEP:] or "no output"
    if problem is not None:
        raise InstallError(f"git clone of {where} stopped: {problem}")
    if proc.returncode != 0:
        raise InstallError(
            f"git clone of {where} failed (exit {proc.returncode}; no file may exceed "
            f"{MAX_TOTAL_BYTES} bytes, the skill size limit):\n{text}"
        )


def _git_limits() -> list[str]:
    """``prlimit`` bounding each file git writes, when util-linux has it."""
    prlimit = shutil.which("prlimit", path="/usr/local/bin:/usr/bin:/bin")
    return [prlimit, f"--fsize={MAX_TOTAL_BYTES}", "--"] if prlimit else []


def _watch_clone(
    proc: subprocess.Popen[bytes], dest: str, progress: Callable[[int], None] | None
) -> str | None:
    """Wait for the clone, telling ``progress`` of the bytes written; stop it (its whole
    group) when it takes too long or writes too much, and say why."""
    deadline = time.monotonic() + GIT_TIMEOUT_S
    problem = None
    seen = 0
    while proc.poll() is None:
        files, size = _du(dest)
        if progress is not None and size > seen:
            progress(size - seen)
            seen = size
        if time.monotonic() > deadline:
            problem = f"took over {GIT_TIMEOUT_S}s"
        elif size > 2 * MAX_TOTAL_BYTES:  # the pack and the checkout, each within limits
            problem = f"wrote over {2 * MAX_TOTAL_BYTES} bytes"
        elif files > 2 * MAX_FILES:
            problem = f"wrote over {2 * MAX_FILES} files"
        if problem is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return problem
        time.sleep(0.05)
    return None


def _du(root: str) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
    return files, size


def _record(config: SkillsConfig, name: str) -> InstalledSkill:
    for r in config.installed:
        if r.name == name:
            return r
    raise InstallError(
        f"no installed skill named {name!r}; `skillog skills list` shows what is installed"
    )


def _with(config: SkillsConfig, **changes: object) -> SkillsConfig:
    return msgspec.structs.replace(config, **changes)
