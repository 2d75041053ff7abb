"""Where skills come from: sources in precedence order, and the bounded directory walk.

Precedence, highest first (``docs/skills.md``): builtin, org (configured), project
(``<project>/.agents/skills`` then ``<project>/.claude/skills``), other configured
directories, user (``~/.agents/skills`` then ``~/.claude/skills``), installed. The
first source that has a name wins; the others are reported as shadowed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence

import msgspec

from ._config import SkillsConfig, default_install_dir
from ._model import Tier

SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".hg", ".svn"})
SKILL_FILES = ("SKILL.md", "skill.md")


class SkillSource(msgspec.Struct, frozen=True, kw_only=True):
    """A directory to discover skills in.

    ``label`` is stable and holds no absolute path (``project:.claude/skills``); it is
    the ``source`` of every skill found here. ``scope`` is one of builtin, org,
    project, config, user, installed.
    """

    path: str
    tier: Tier
    label: str
    scope: str = "config"


def default_sources(
    config: SkillsConfig,
    *,
    project: str | None,
    home: str | None = None,
    builtin: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> list[SkillSource]:
    """The sources to scan, in precedence order, for this configuration (the trust
    order unless ``config.precedence`` is ``plugin``).

    ``project`` is the project directory (``None``: no project scope); ``home``
    defaults to ``$HOME``. Both are injectable for tests.
    """
    env = os.environ if env is None else env
    home = home or env.get("HOME") or os.path.expanduser("~")
    out = [
        SkillSource(
            path=os.path.abspath(p), tier=Tier.BUILTIN, label=f"builtin:{i}", scope="builtin"
        )
        for i, p in enumerate(builtin)
    ]
    configured = [
        SkillSource(
            path=_expand(d.path, home),
            tier=d.tier,
            label=d.label or f"config{i}:{os.path.basename(d.path.rstrip('/')) or 'root'}",
            scope="org" if d.tier is Tier.ORG else "config",
        )
        for i, d in enumerate(config.dirs)
    ]
    out += [s for s in configured if s.scope == "org"]
    if config.conventional and project is not None:
        for rel in (".agents/skills", ".claude/skills"):
            out.append(
                SkillSource(
                    path=os.path.join(os.path.abspath(project), rel),
                    tier=config.project_tier,
                    label=f"project:{rel}",
                    scope="project",
                )
            )
    out += [s for s in configured if s.scope == "config"]
    if config.conventional:
        for rel in (".agents/skills", ".claude/skills"):
            out.append(
                SkillSource(
                    path=os.path.join(home, rel),
                    tier=Tier.USER,
                    label=f"user:~/{rel}",
                    scope="user",
                )
            )
    out.append(
        SkillSource(
            path=install_dir(config, env),
            tier=Tier.THIRD_PARTY,
            label="installed",
            scope="installed",
        )
    )
    if config.precedence == "plugin":
        # Seed 003's order: what the user installed or the project ships wins over what
        # came with the program (each source keeps its tier; only who shadows whom changes).
        out.sort(key=lambda s: PLUGIN_ORDER.index(s.scope))
    return out


PLUGIN_ORDER = ("installed", "project", "config", "user", "org", "builtin")
"""The scopes in ``precedence: plugin`` order, highest first (seed 003 PRI)."""


def split_skill_dirs(dirs: Sequence[str], tier: Tier) -> tuple[list[str], list[SkillSource]]:
    """Directories named by a user (``run --skills DIR``): ``(skill dirs, folders)``.

    A directory holding ``SKILL.md`` is one skill (a ref); any other existing directory
    is a folder of skills, a source labelled ``arg<i>:<basename>``. Anything else is
    returned as a ref, so loading it reports what is wrong with it.
    """
    refs: list[str] = []
    folders: list[SkillSource] = []
    for i, d in enumerate(dirs):
        path = os.path.abspath(d)
        if os.path.isdir(path) and not _has_skill_md(path):
            label = f"arg{i}:{os.path.basename(path.rstrip('/')) or 'root'}"
            folders.append(SkillSource(path=path, tier=tier, label=label))
        else:
            refs.append(path)
    return refs, folders


def install_dir(config: SkillsConfig, env: Mapping[str, str] | None = None) -> str:
    """The directory installed skills live in."""
    if config.install_dir:
        return os.path.abspath(os.path.expanduser(config.install_dir))
    return default_install_dir(env)


def find_skill_dirs(
    root: str,
    *,
    max_depth: int,
    max_dirs: int,
    follow_external: bool = False,
    listed: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Skill directories under ``root`` (itself included), and notes on what was cut.

    A directory holding ``SKILL.md`` (or ``skill.md``) that is not itself a directory is
    a skill and is not searched further (a broken one is rejected with its reason).
    Others are searched breadth-first, hidden category folders (``.curated``) included,
    ``.git``/``node_modules`` and friends skipped, symlinked directories followed once
    (cycles cut by device+inode) when they stay inside ``root`` (or, with
    ``follow_external``, wherever they point; a link not followed is noted), down to
    ``max_depth`` levels below ``root`` and across at most ``max_dirs`` directories.
    Returned paths are sorted by their path relative to ``root``, which is the order
    of precedence within one source. ``listed``, when given, receives every directory
    that was listed (not the skills): a skill added, removed or renamed anywhere the
    search reached changes one of their mtimes.
    """
    found: list[str] = []
    notes: list[str] = []
    try:
        st = os.stat(root)
    except OSError:
        return [], []
    seen = {(st.st_dev, st.st_ino)}
    real_root = os.path.realpath(root)
    level = [(root, st.st_dev)]
    visited = 0
    for depth in range(max_depth + 1):
        following: list[tuple[str, int]] = []
        for directory, dev in level:
            visited += 1
            if visited > max_dirs:
                notes.append(
                    f"stopped after {max_dirs} directories (max_dirs); skills further in "
                    "were not searched - raise max_dirs or point at a narrower directory"
                )
                return _ordered(found, root), notes
            # One stat answers "is this a skill?" for the common case, without listing.
            if _has_skill_md(directory):
                found.append(directory)
                continue
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError as err:
                notes.append(f"{directory}: cannot be listed ({err.strerror}); skipped")
                continue
            if listed is not None:
                listed.append(directory)
            for e in entries:
                if e.name in SKIP_DIRS or not _is_dir(e):
                    continue
                if e.is_symlink():
                    try:
                        est = os.stat(e.path)
                    except OSError:
                        continue
                    if not follow_external and not _inside(os.path.realpath(e.path), real_root):
                        notes.append(
                            f"{e.path[len(root.rstrip('/')) + 1 :]}: a symlink to a folder "
                            "outside this source, not followed (set "
                            "skills.follow_external_symlinks: true to follow it)"
                        )
                        continue
                    key, child_dev = (est.st_dev, est.st_ino), est.st_dev
                else:
                    key, child_dev = (dev, e.inode()), dev
                if key not in seen:
                    seen.add(key)
                    following.append((e.path, child_dev))
        if not following:
            break
        if depth == max_depth:
            notes.append(
                f"directories deeper than {max_depth} levels below {root} were not searched "
                "(max_depth)"
            )
        level = following
    return _ordered(found, root), notes


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _ordered(found: list[str], root: str) -> list[str]:
    cut = len(root.rstrip("/")) + 1  # every path found starts with root + "/" (or is root)
    return sorted(found, key=lambda p: p[cut:].encode())


def _has_skill_md(directory: str) -> bool:
    # Any entry but a directory: a FIFO or a bad symlink named SKILL.md makes a skill
    # that is rejected with the reason, not a folder silently searched further.
    for name in SKILL_FILES:
        try:
            if not stat.S_ISDIR(os.lstat(f"{directory}/{name}").st_mode):
                return True
        except OSError:
            continue
    return False


def _expand(path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    return os.path.abspath(path)


def _is_dir(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False
