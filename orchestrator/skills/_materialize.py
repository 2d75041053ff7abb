"""Write skills into a directory (e.g. ``.claude/skills/``) for filesystem-based agents.

Each skill lands in ``<dest>/<name>/`` through a temporary sibling and a rename, so an
agent never sees half a skill; the written tree is re-hashed and must equal the skill's
hash (the log's record of what the agent was given stays true). Executable bits are
preserved; in-root symlinks become regular files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence

from eventlog import os_error_message

from ._errors import DuplicateSkillError, InstallError, SkillChangedError
from ._hash import manifest_of
from ._inline import InlineSkill
from ._model import Skill
from ._tree import read_file, walk_tree
from ._validate import is_safe_dir_name


def copy_skill_tree(root: str, dest: str) -> None:
    """Copy the files of the skill at ``root`` into the new directory ``dest``.

    Uses the same walk as the hash, so refused entries (escaping symlinks, special
    files) raise :class:`InstallError` and nothing outside the root is ever read.
    """
    files, problems = walk_tree(root)
    if problems:
        raise InstallError(f"cannot copy {root}:\n  " + "\n  ".join(str(p) for p in problems))
    os.makedirs(dest)
    for f in files:
        target = os.path.join(dest, *f.rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        data = read_file(f.path)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if f.executable else 0o644)
        with open(fd, "wb") as out:
            out.write(data)
        # The umask may have cleared bits; the hash needs the owner-exec bit exact.
        os.chmod(target, 0o755 if f.executable else 0o644)


def materialize(
    skills: Sequence[Skill | InlineSkill], dest: str, *, overwrite: bool = False
) -> list[str]:
    """Write each skill to ``dest/<name>``; return the directories written.

    A directory that already holds the same skill hash is left alone. One holding
    something else is replaced only with ``overwrite=True``, else
    :class:`InstallError`. Two skills with one name raise :class:`DuplicateSkillError`.
    """
    names: dict[str, str] = {}
    for s in skills:
        origin = "inline" if isinstance(s, InlineSkill) else (s.root or s.source)
        if s.name in names:
            raise DuplicateSkillError(
                f"two skills to materialize are named {s.name!r}: {names[s.name]} and {origin}"
            )
        if not is_safe_dir_name(s.name):
            raise InstallError(f"skill name {s.name!r} cannot be used as a directory name")
        names[s.name] = origin
    os.makedirs(dest, exist_ok=True)
    written: list[str] = []
    for s in skills:
        skill = s.to_skill() if isinstance(s, InlineSkill) else s
        final = os.path.join(dest, skill.name)
        if os.path.lexists(final):
            if _hash_or_none(final) == skill.hash:
                continue
            if not overwrite:
                raise InstallError(
                    f"{final} exists with other content; pass overwrite (--force) to replace it"
                )
        try:
            staging = tempfile.mkdtemp(dir=dest, prefix=f".{skill.name}.")
        except OSError as e:
            raise InstallError(
                f"cannot write the skill to {final}: {os_error_message(e, where='directory')}"
            ) from e
        try:
            tree = os.path.join(staging, skill.name)
            if isinstance(s, InlineSkill):
                os.makedirs(tree)
                with open(os.path.join(tree, "SKILL.md"), "wb") as f:
                    f.write(s.skill_md())
            else:
                if skill.root is None:
                    raise InstallError(f"skill {skill.name!r} has no directory to copy")
                copy_skill_tree(skill.root, tree)
            got = manifest_of(tree).hash
            if got != skill.hash:
                raise SkillChangedError(
                    f"skill {skill.name!r} changed on disk since it was loaded "
                    f"(sha256:{skill.hash[:12]} is now sha256:{got[:12]}); reload it"
                )
            if os.path.lexists(final):
                _remove(final)
            os.replace(tree, final)
        except OSError as e:
            raise InstallError(
                f"cannot write the skill to {final}: {os_error_message(e, where='directory')}"
            ) from e
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        written.append(final)
    return written


def _hash_or_none(path: str) -> str | None:
    try:
        return manifest_of(path).hash
    except Exception:
        return None


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
