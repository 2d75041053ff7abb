"""The catalog: every skill the sources hold, resolved by precedence, with its status.

``build_catalog`` is the I/O edge (walks, reads only what changed, checks PATH);
precedence, filters and status are decided by pure helpers over what it found. The
result's records are frozen structs without floats: the runtime logs them as "the
registry snapshot the session sees" and "what an indexing run found and rejected".
"""

from __future__ import annotations

import enum
import fnmatch
import os
import time
from collections.abc import Callable, Collection, Sequence
from functools import partial

import msgspec
import trio

from ._config import SkillsConfig
from ._deps import DependencyError, missing_needs, parse_requires
from ._discover import SkillSource, find_skill_dirs
from ._errors import (
    DuplicateSkillError,
    Problem,
    SkillChangedError,
    SkillNotFoundError,
    SkillValidationError,
)
from ._index import RACY_NS, IndexedSkill, SkillIndex, fingerprint
from ._inline import InlineSkill
from ._model import Skill, SkillProperties, Tier
from ._parse import dir_problem, load_skill, skill_from_tree
from ._requires import CommandChecker
from ._tree import TreeDir, TreeFile, stamps, stat_known, walk_tree


class Status(enum.StrEnum):
    """Whether the model may see a skill."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    UNAVAILABLE = "unavailable"


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
    """Where an installed skill came from."""

    origin: str
    kind: str
    ref: str | None = None
    installed_at: int = 0


class CatalogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One skill of the catalog (seed 000 R2's index entry)."""

    id: str
    name: str
    description: str
    source: str
    tier: Tier
    path: str | None  # skill directory; None for inline skills
    location: str | None  # SKILL.md
    hash: str
    last_modified: int  # newest file mtime, ns; 0 for inline
    properties: SkillProperties
    status: Status = Status.ENABLED
    reason: str | None = None
    provenance: Provenance | None = None
    warnings: tuple[Problem, ...] = ()


class Rejected(msgspec.Struct, frozen=True, kw_only=True):
    """A skill directory that failed validation, with every problem."""

    path: str
    source: str
    problems: tuple[Problem, ...]


class Shadowed(msgspec.Struct, frozen=True, kw_only=True):
    """A valid skill hidden by a higher-precedence skill of the same name."""

    id: str
    name: str
    path: str | None
    source: str
    hash: str
    by: str  # id of the winning entry


class CatalogRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Everything an indexing run found, in deterministic order, for the event log."""

    entries: tuple[CatalogEntry, ...]
    rejected: tuple[Rejected, ...]
    shadowed: tuple[Shadowed, ...]
    notes: tuple[str, ...]


class Catalog:
    """The resolved skills: entries by name, plus what was rejected and shadowed."""

    def __init__(
        self,
        record: CatalogRecord,
        inline: dict[str, InlineSkill],
        strict: bool,
        headings: dict[str, tuple[str, ...]] | None = None,
        listed: tuple[str, ...] = (),
    ) -> None:
        self.record = record
        # The folders the sources' search listed (not skills): a skill added, removed or
        # renamed at any depth it reached changes one's mtime (DiscoveryCache).
        self.listed = listed
        self._inline = inline
        self._strict = strict
        self._by_name = {e.name: e for e in record.entries}
        self._headings = headings or {}  # by skill directory

    @property
    def entries(self) -> tuple[CatalogEntry, ...]:
        """Every winning skill, whatever its status, sorted by name."""
        return self.record.entries

    @property
    def rejected(self) -> tuple[Rejected, ...]:
        return self.record.rejected

    @property
    def shadowed(self) -> tuple[Shadowed, ...]:
        return self.record.shadowed

    def visible(self) -> tuple[CatalogEntry, ...]:
        """What the model may see: enabled skills, sorted by name (codepoint order)."""
        return tuple(e for e in self.record.entries if e.status is Status.ENABLED)

    def entry(self, name: str) -> CatalogEntry:
        """The entry named ``name`` whatever its status; :class:`SkillNotFoundError`."""
        try:
            return self._by_name[name]
        except KeyError:
            raise SkillNotFoundError(
                f"no skill named {name!r} in the catalog; `skillog skills list` shows them"
            ) from None

    def inline(self, name: str) -> InlineSkill | None:
        """The inline skill (with its tools) named ``name``, if it is one."""
        return self._inline.get(name)

    def get(self, name: str) -> Skill:
        """The visible skill ``name``, with its body, read now from its directory.

        Raises :class:`SkillNotFoundError` if it is absent, disabled or unavailable
        (with the reason), and :class:`SkillChangedError` if its files no longer hash
        to the catalog's hash (rebuild the catalog so the model sees the new version).
        """
        e = self.entry(name)
        if e.status is not Status.ENABLED:
            raise SkillNotFoundError(f"skill {name!r} is {e.status}: {e.reason}")
        if name in self._inline:
            return self._inline[name].to_skill()
        assert e.path is not None
        try:
            skill = load_skill(e.path, tier=e.tier, source=e.source, strict=self._strict)
        except SkillValidationError as err:
            raise SkillChangedError(
                f"skill {name!r} at {e.path} changed on disk and is now invalid: "
                f"{err.problems[0]}; rebuild the catalog"
            ) from err
        if skill.hash != e.hash:
            raise SkillChangedError(
                f"skill {name!r} at {e.path} changed on disk since the catalog was built "
                f"(sha256:{e.hash[:12]} is now sha256:{skill.hash[:12]}); rebuild the catalog"
            )
        return skill

    def indexed(self, name: str) -> Skill:
        """The visible skill ``name`` as the index holds it, reading nothing: its
        ``body`` is empty (loading it in a session reads and re-hashes it then). What a
        runtime starts from, so a warm start costs the index's stats, not a hash of
        every skill (:meth:`get` reads and hashes now)."""
        e = self.entry(name)
        if e.status is not Status.ENABLED:
            raise SkillNotFoundError(f"skill {name!r} is {e.status}: {e.reason}")
        if name in self._inline:
            return self._inline[name].to_skill()
        return Skill(
            name=e.name,
            description=e.description,
            body="",
            properties=e.properties,
            hash=e.hash,
            tier=e.tier,
            source=e.source,
            root=e.path,
            location=e.location,
            warnings=e.warnings,
            headings=self._headings.get(e.path or "", ()),
        )

    async def get_async(self, name: str) -> Skill:
        """:meth:`get` on a worker thread, for use inside trio."""
        return await trio.to_thread.run_sync(self.get, name)


def build_catalog(
    sources: Sequence[SkillSource],
    *,
    config: SkillsConfig | None = None,
    inline: Sequence[InlineSkill] = (),
    refs: Sequence[str] = (),
    ref_tier: Tier = Tier.USER,
    index: SkillIndex | None = None,
    checker: CommandChecker | None = None,
    clock: Callable[[], int] = time.time_ns,
    mcp_servers: Collection[str] | None = None,
    lazy_install: bool = False,
) -> Catalog:
    """Discover, load (or reuse from ``index``) and resolve every skill.

    Precedence, highest first: ``inline`` skills, ``refs`` (skill directories named in
    code), then ``sources`` in order; within a source, by relative path. Two inline
    skills, two refs, or an inline skill and a ref with one name raise
    :class:`DuplicateSkillError` naming both; any other collision shadows.
    ``mcp_servers`` are the configured MCP servers' names (``mcp:`` requirements).
    With ``lazy_install`` (the policy's ``lazy_install: ask``) a skill whose ``python:``
    environment is not built stays enabled: its first script asks to build it.
    """
    config = config or SkillsConfig()
    strict = not config.lenient
    checker = checker or CommandChecker(timeout_s=config.requires_timeout_ms / 1000)
    cache = index.load() if index is not None else {}
    now = clock()
    changed: list[tuple[str, str, bool, IndexedSkill, tuple[list[str], list[str]]]] = []
    seen: set[str] = set()
    heads: dict[str, tuple[str, ...]] = {}

    def scan(root: str) -> IndexedSkill:
        rec = _scan(root)
        heads[root] = rec.headings
        return rec

    def _scan(root: str) -> IndexedSkill:
        seen.add(root)
        hit = cache.get(root)
        if hit is not None and not hit[1]:
            known = SkillIndex.decode_paths(hit[3])
            now_stamps = stat_known(root, *known) if known is not None else None
            if now_stamps is not None and fingerprint(now_stamps, strict) == hit[0]:
                rec = SkillIndex.decode(hit[2])
                if rec is not None:
                    return rec
        dirs: list[TreeDir] = []
        files, problems = walk_tree(root, dirs)
        rec = _load(root, files, problems, strict)
        newest = max([f.mtime_ns for f in files] + [d.mtime_ns for d in dirs], default=0)
        racy = newest >= now - RACY_NS
        paths = ([d.rel for d in dirs], [f.rel for f in files])
        changed.append((root, fingerprint(stamps(files, dirs), strict), racy, rec, paths))
        return rec

    candidates: list[CatalogEntry] = []
    rejected: list[Rejected] = []
    notes: list[str] = []
    origins: dict[str, str] = {}
    for s in inline:
        _claim(origins, s.name, f"inline skill {s.name!r}")
        candidates.append(_inline_entry(s))
    for i, ref in enumerate(refs):
        path = os.path.abspath(ref)
        problem = dir_problem(path)
        if problem is not None:
            rejected.append(Rejected(path=path, source="ref", problems=(problem,)))
            continue
        rec = scan(path)
        if rec.properties is None:
            rejected.append(Rejected(path=rec.root, source="ref", problems=rec.problems))
            continue
        _claim(origins, rec.properties.name, f"skill directory {rec.root}")
        candidates.append(_entry(rec, f"ref/{i}", "ref", ref_tier, None))
    installed = {r.name: r for r in config.installed}
    listed: list[str] = []
    for src in sources:
        dirs, more = find_skill_dirs(
            src.path,
            max_depth=config.max_depth,
            max_dirs=config.max_dirs,
            follow_external=config.follow_external_symlinks,
            listed=listed,
        )
        notes += [f"{src.label}: {n}" for n in more]
        for d in dirs:
            rec = scan(d)
            if rec.properties is None:
                rejected.append(Rejected(path=d, source=src.label, problems=rec.problems))
                continue
            rel = d[len(src.path.rstrip("/")) + 1 :] or os.path.basename(d)
            tier, prov = src.tier, None
            inst = installed.get(os.path.basename(d)) if src.scope == "installed" else None
            if inst is not None:
                tier = inst.tier
                prov = Provenance(
                    origin=inst.origin,
                    kind=inst.kind,
                    ref=inst.ref,
                    installed_at=inst.installed_at,
                )
            candidates.append(_entry(rec, f"{src.label}/{rel}", src.label, tier, prov))
    if index is not None:
        index.save(changed, keep=seen, now=now)
    winners, shadowed = resolve(candidates)
    entries = tuple(
        sorted(
            (_status(e, config, checker, mcp_servers, lazy_install) for e in winners),
            key=lambda e: e.name,
        )
    )
    record = CatalogRecord(
        entries=entries, rejected=tuple(rejected), shadowed=tuple(shadowed), notes=tuple(notes)
    )
    return Catalog(record, {s.name: s for s in inline}, strict, heads, tuple(listed))


async def build_catalog_async(sources: Sequence[SkillSource], **kwargs: object) -> Catalog:
    """:func:`build_catalog` on a worker thread, for use inside trio."""
    return await trio.to_thread.run_sync(partial(build_catalog, sources, **kwargs))  # type: ignore[arg-type]


def resolve(candidates: Sequence[CatalogEntry]) -> tuple[list[CatalogEntry], list[Shadowed]]:
    """First candidate of each name wins; the rest are shadowed by it. Pure."""
    winners: dict[str, CatalogEntry] = {}
    shadowed: list[Shadowed] = []
    for c in candidates:
        w = winners.get(c.name)
        if w is None:
            winners[c.name] = c
        else:
            shadowed.append(
                Shadowed(id=c.id, name=c.name, path=c.path, source=c.source, hash=c.hash, by=w.id)
            )
    return list(winners.values()), shadowed


def filter_reason(name: str, config: SkillsConfig) -> str | None:
    """Why configuration disables ``name``, or ``None``. Pure."""
    if name in config.disabled:
        return "disabled in the configuration (skillog skills enable NAME)"
    for pattern in config.deny:
        if fnmatch.fnmatchcase(name, pattern):
            return f"matches the deny pattern {pattern!r}"
    if config.allow and not any(fnmatch.fnmatchcase(name, p) for p in config.allow):
        return f"matches none of the allow patterns {', '.join(config.allow)}"
    return None


def _status(
    e: CatalogEntry,
    config: SkillsConfig,
    checker: CommandChecker,
    mcp_servers: Collection[str] | None = None,
    lazy_install: bool = False,
) -> CatalogEntry:
    reason = filter_reason(e.name, config)
    if reason is not None:
        return msgspec.structs.replace(e, status=Status.DISABLED, reason=reason)
    try:
        needs = parse_requires(e.properties.metadata.get("requires", ""))
    except DependencyError as err:
        return msgspec.structs.replace(e, status=Status.UNAVAILABLE, reason=str(err))
    commands = [n.spec for n in needs if n.kind == "command"]
    missing = checker.missing(commands) if commands else None
    unmet = missing_needs(needs, name=e.name, mcp_servers=mcp_servers, lazy_install=lazy_install)
    if missing is not None or unmet:
        reasons = [*([missing] if missing else []), *(f"needs {u}" for u in unmet)]
        return msgspec.structs.replace(e, status=Status.UNAVAILABLE, reason="; ".join(reasons))
    return e


def _claim(origins: dict[str, str], name: str, origin: str) -> None:
    if name in origins:
        raise DuplicateSkillError(
            f"two skills are named {name!r}: {origins[name]} and {origin}; rename one"
        )
    origins[name] = origin


def _load(root: str, files: list[TreeFile], problems: list[Problem], strict: bool) -> IndexedSkill:
    try:
        skill = skill_from_tree(root, files, problems, tier=Tier.USER, source="", strict=strict)
    except SkillValidationError as e:
        return IndexedSkill(root=root, problems=e.problems, warnings=e.warnings)
    return IndexedSkill(
        root=root,
        location=skill.location,
        properties=skill.properties,
        hash=skill.hash,
        last_modified=max((f.mtime_ns for f in files), default=0),
        warnings=skill.warnings,
        headings=skill.headings,
    )


def _entry(
    rec: IndexedSkill, id_: str, source: str, tier: Tier, provenance: Provenance | None
) -> CatalogEntry:
    assert rec.properties is not None and rec.hash is not None
    return CatalogEntry(
        id=id_,
        name=rec.properties.name,
        description=rec.properties.description,
        source=source,
        tier=tier,
        path=rec.root,
        location=rec.location,
        hash=rec.hash,
        last_modified=rec.last_modified,
        properties=rec.properties,
        provenance=provenance,
        warnings=rec.warnings,
    )


def _inline_entry(s: InlineSkill) -> CatalogEntry:
    skill = s.to_skill()
    return CatalogEntry(
        id=f"inline/{skill.name}",
        name=skill.name,
        description=skill.description,
        source="inline",
        tier=skill.tier,
        path=None,
        location=None,
        hash=skill.hash,
        last_modified=0,
        properties=skill.properties,
    )
