"""``skillog skills``: list, show, validate, install, update, remove, enable, disable,
materialize, sign. A thin layer over the library; errors become one-line messages.

Exit codes: 0 ok; 1 a validation failed; 2 unusable input (bad path, config, database).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from typing import Literal

import msgspec

from eventlog import default_db, inert_json, is_postgres_url, sqlite_path, visible
from eventlog._progress import Progress

from ..skills import (
    Catalog,
    CatalogEntry,
    EnvRecord,
    InstalledSkill,
    NameConflictError,
    Rejected,
    SkillIndex,
    SkillIndexError,
    SkillNotFoundError,
    SkillsConfig,
    SkillSearch,
    SkillValidationError,
    Status,
    Tier,
    ToolsetError,
    build_catalog,
    build_env,
    check_env,
    check_signature,
    config_path,
    default_sources,
    env_state,
    filter_reason,
    install,
    load_config,
    load_mcp_servers,
    load_skill,
    materialize,
    parse_requires,
    python_requirements,
    read_toolset,
    remove,
    save_config,
    search_doc,
    sign_skill,
    trusted_signers,
    update,
)

_SYMBOL = {Status.ENABLED: "✓", Status.DISABLED: "○", Status.UNAVAILABLE: "✗"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``skills`` subcommands."""
    parser.add_argument(
        "--config",
        help="skills config file (default: $SKILLOG_CONFIG or ~/.config/skillog/config.yaml)",
    )
    parser.add_argument(
        "--db",
        help="the event log, whose SQLite file also holds the skills index "
        "(default: $SKILLOG_DB or ./skillog.db; a postgresql:// log keeps no index)",
    )
    parser.add_argument(
        "--project",
        default=".",
        help="project directory for .agents/skills and .claude/skills (default: .)",
    )
    parser.add_argument("--no-index", action="store_true", help="scan without the persistent index")
    sub = parser.add_subparsers(dest="skills_command", metavar="ACTION", required=True)
    p = sub.add_parser(
        "list", help="list skills: ✓ enabled, ○ disabled, ✗ unavailable (with the reason)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the catalog record as JSON, with catalog_tokens: the estimated tokens "
        "of <available_skills> in each catalog mode (null when no skill is visible)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="also record this indexing run in the event log (stream skills-index of --db)",
    )
    p = sub.add_parser(
        "search", help="rank the visible skills for a query (what skills.search answers)"
    )
    p.add_argument("query", nargs="+")
    p.add_argument("--limit", type=int, default=5, help="how many results (default: 5)")
    _json_flag(p, '{"query", "results": [{"name", "description"}]}')
    p = sub.add_parser(
        "deps",
        help="show a skill's metadata.requires and their state; --install builds its own "
        "Python environment (pip, network for that step only) and records the lock",
    )
    p.add_argument("name")
    p.add_argument(
        "--install", action="store_true", help="build the skill's environment (asks for user "
        "and third-party skills unless --yes)",
    )  # fmt: skip
    p.add_argument("--yes", action="store_true", help="install without asking")
    _json_flag(p, '{"name", "needs": [{"kind", "spec"}], "env": {key, path, built, lock}}')
    p = sub.add_parser("show", help="show one skill's entry and SKILL.md body")
    p.add_argument("name")
    _json_flag(p, "the catalog entry with its body, or {name, rejected: [...]}")
    p = sub.add_parser("validate", help="validate skill directories (or SKILL.md files)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--lenient", action="store_true", help="apply the client guide's lenient rules")
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per path: path, valid, name, hash, problems, warnings",
    )
    p = sub.add_parser("install", help="install a skill from a folder, a .zip or a git URL")
    p.add_argument("source")
    p.add_argument("--ref", help="git branch or tag")
    p.add_argument(
        "--name",
        help="install under this name (SKILL.md's name rewritten in the installed copy); "
        "in a repository holding several skills, the skill of that directory name",
    )
    p.add_argument(
        "--on-conflict",
        choices=["rename", "skip", "replace"],
        help="when a skill of that name is installed: install as NAME-2 (rename), do "
        "nothing (skip) or replace it; asked on a terminal, an error otherwise",
    )
    p.add_argument(
        "--tier",
        choices=[t.value for t in Tier],
        help="trust tier (default: user for folders, third-party otherwise)",
    )
    _json_flag(p, _RECORD_SHAPE)
    p = sub.add_parser("update", help="re-install an installed skill from its origin")
    p.add_argument("name")
    _json_flag(p, _RECORD_SHAPE)
    p = sub.add_parser("remove", help="delete an installed skill")
    p.add_argument("name")
    _json_flag(p, _RECORD_SHAPE)
    p = sub.add_parser("enable", help="enable a skill by name")
    p.add_argument("name")
    _json_flag(p, _TOGGLE_SHAPE)
    p = sub.add_parser("disable", help="disable a skill by name (hidden from the model)")
    p.add_argument("name")
    _json_flag(p, _TOGGLE_SHAPE)
    p = sub.add_parser(
        "sign", help="sign skills' hashes with an Ed25519 key (written next to each as DIR.sig)"
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="skill directories")
    p.add_argument(
        "--key", required=True, help="private key file (create one with `skillog log keygen`)"
    )
    _json_flag(p, '{"signed": [{"name", "hash", "signature"}]} (the .sig files written)')
    p = sub.add_parser("materialize", help="write skills into a directory such as .claude/skills")
    p.add_argument("--to", required=True, metavar="DIR")
    p.add_argument("--force", action="store_true", help="replace directories holding other content")
    p.add_argument(
        "names", nargs="*", metavar="NAME", help="skills to write (default: every visible one)"
    )
    _json_flag(p, '{"written": [the SKILL.md directories written]}')


_RECORD_SHAPE = "the installed skill's record: name, origin, kind, ref, tier, installed_at, hash"
_TOGGLE_SHAPE = '{"name", "enabled", "note"} (note: why it stays disabled, or null)'


def _json_flag(parser: argparse.ArgumentParser, shape: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print JSON: {shape}")


@contextlib.contextmanager
def _progress(what: str, as_json: bool) -> Iterator[Progress]:
    """A progress line on a terminal (never with ``--json``), erased when done."""
    progress = Progress(what, enabled=not as_json)
    try:
        yield progress
    finally:
        progress.close()


def _out(as_json: bool, value: object, text: str) -> None:
    """Print ``value`` as JSON with ``--json``, else ``text`` (when there is any)."""
    if as_json:
        _print_json(value)
    elif text:
        print(visible(text, lines=True))


def _print_json(value: object) -> None:
    text = inert_json(msgspec.json.format(msgspec.json.encode(value)).decode())
    sys.stdout.buffer.write(text.encode() + b"\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """Run one ``skills`` action; returns the exit code."""
    cfg_file = args.config or config_path()
    config = load_config(cfg_file)
    action = args.skills_command
    if action == "validate":
        return _validate(args.paths, strict=not args.lenient, as_json=args.json)
    if action == "sign":
        signed = []
        for path in args.paths:
            skill = load_skill(path, tier=Tier.USER, source="cli", strict=not config.lenient)
            sig = sign_skill(path, skill.name, skill.hash, args.key)
            signed.append({"name": skill.name, "hash": skill.hash, "signature": str(sig)})
        lines = [f"signed {d['name']} sha256:{d['hash']} in {d['signature']}" for d in signed]
        _out(args.json, {"signed": signed}, "\n".join(lines))
        return 0
    if action == "install":
        return _install(args, config, cfg_file)
    if action == "update":
        before = {i.name: i.hash for i in config.installed}
        with _progress("cloned bytes", args.json) as progress:
            r = update(args.name, config=config, config_file=cfg_file, progress=progress)
        _record_installed("update", r, args.db or default_db(), before.get(r.name), quiet=args.json)
        _out(args.json, r, f"updated {r.name} sha256:{r.hash}")
        return 0
    if action == "remove":
        r = remove(args.name, config=config, config_file=cfg_file)
        _record_installed("remove", r, args.db or default_db(), quiet=args.json)
        _out(args.json, r, f"removed {r.name}")
        return 0
    catalog = _catalog(args, config)
    if action in ("enable", "disable"):
        return _toggle(args.name, action == "enable", catalog, config, cfg_file, as_json=args.json)
    if action == "list":
        if args.record:
            _record(catalog, args.db or default_db())
        return _list(catalog, as_json=args.json)
    if action == "deps":
        return _deps(catalog, args)
    if action == "search":
        query = " ".join(args.query)
        return _search(catalog, query, args.limit, _index_file(args), as_json=args.json)
    if action == "show":
        trusted = trusted_signers(config, cfg_file)
        return _show(catalog, args.name, trusted, cfg_file, as_json=args.json)
    skills = (
        [catalog.inline(n) or catalog.get(n) for n in args.names]
        if args.names
        else [catalog.get(e.name) for e in catalog.visible()]
    )
    written = materialize(skills, args.to, overwrite=args.force)
    _out(args.json, {"written": written}, "\n".join(f"wrote {path}" for path in written))
    return 0


def _index_file(args: argparse.Namespace) -> str | None:
    """The SQLite file holding the skills index and search table, None without one."""
    if args.no_index:
        return None
    db = args.db or default_db()
    # The index is a local cache in the SQLite file; a PostgreSQL log has none.
    return None if is_postgres_url(db) else sqlite_path(db)


def _catalog(args: argparse.Namespace, config: SkillsConfig) -> Catalog:
    sources = default_sources(config, project=args.project)
    servers = [s.name for s in load_mcp_servers(args.config or config_path())]
    path = _index_file(args)
    if path is None:
        return build_catalog(sources, config=config, mcp_servers=servers)
    index = SkillIndex(path)
    try:
        return build_catalog(sources, config=config, index=index, mcp_servers=servers)
    finally:
        index.close()


def _install(args: argparse.Namespace, config: SkillsConfig, cfg_file: str) -> int:
    """``skills install``: on a name conflict, as ``--on-conflict`` says, else asked on
    a terminal (rename, skip or replace), else the error naming both flags."""
    tier = Tier(args.tier) if args.tier else None
    choice = args.on_conflict
    before = {i.name: i.hash for i in config.installed}
    while True:
        try:
            with _progress("cloned bytes", args.json) as progress:
                r = install(
                    args.source,
                    config=config,
                    config_file=cfg_file,
                    ref=args.ref,
                    name=args.name,
                    tier=tier,
                    progress=progress,
                    on_conflict="error" if choice in (None, "skip") else choice,
                )
            break
        except NameConflictError as e:
            if choice is None and sys.stdin.isatty():
                choice = _ask_conflict(e)
                if choice in ("rename", "replace"):
                    continue
            if choice != "skip":
                raise
            _out(args.json, {"skipped": e.name}, f"skipped: {e.name} is already installed")
            return 0
    _record_installed("install", r, args.db or default_db(), before.get(r.name), quiet=args.json)
    _out(args.json, r, f"installed {r.name} ({r.tier}) sha256:{r.hash} from {r.origin}")
    return 0


def _ask_conflict(e: NameConflictError) -> str | None:
    question = (
        f"a skill named {e.name!r} is already installed: [r]ename this one to "
        f"{e.suggestion}, [s]kip, re[p]lace the installed one, or [c]ancel? "
    )
    answer = input(visible(question)).strip().lower()
    return {"r": "rename", "s": "skip", "p": "replace"}.get(answer[:1])


def _record_installed(
    action: Literal["install", "update", "remove"],
    skill: InstalledSkill,
    db: str,
    previous_hash: str | None = None,
    *,
    quiet: bool = False,
) -> None:
    """``skills.installed`` in the log (stream skills-installed) after the change."""
    # Imported here: the runtime's event catalog imports this package.
    import trio

    from .._catalog import open_log
    from .._index_log import record_installed

    async def append() -> None:
        async with open_log(db) as store:
            event = await record_installed(store, action, skill, previous_hash=previous_hash)
        if not quiet:
            print(f"recorded as {event.stream} seq {event.seq}", file=sys.stderr)

    trio.run(append)


def _record(catalog: Catalog, db: str) -> None:
    # Imported here: the runtime's event catalog imports this package.
    import trio

    from .._catalog import open_log
    from .._index_log import record_index_run

    async def record() -> None:
        async with open_log(db) as store:
            event = await record_index_run(store, catalog)
        print(f"recorded indexing run as {event.stream} seq {event.seq}", file=sys.stderr)

    trio.run(record)


class Validation(msgspec.Struct, frozen=True, kw_only=True):
    """`skills validate --json`: one per path (a stable shape, docs/skills.md)."""

    path: str
    valid: bool
    name: str | None = None
    hash: str | None = None
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _validate(paths: list[str], *, strict: bool, as_json: bool = False) -> int:
    results = [_validate_one(path, strict=strict) for path in paths]
    for r in results:
        if as_json:
            print(inert_json(msgspec.json.encode(r).decode()))
            continue
        for p in r.problems:
            print(visible(p))
        for w in r.warnings:
            print(f"warning: {visible(w)}")
        if r.valid:
            print(f"{visible(r.path)}: valid skill {visible(r.name or '')} {r.hash}")
    return 0 if all(r.valid for r in results) else 1


def _validate_one(path: str, *, strict: bool) -> Validation:
    root = os.path.dirname(path) if os.path.basename(path).lower() == "skill.md" else path
    try:
        skill = load_skill(root or ".", tier=Tier.USER, source="cli", strict=strict)
    except SkillValidationError as e:
        return Validation(
            path=root,
            valid=False,
            problems=tuple(map(str, e.problems)),
            warnings=tuple(map(str, e.warnings)),
        )
    try:
        read_toolset(skill.name, root or ".")
    except ToolsetError as e:
        return Validation(
            path=root, valid=False, problems=(str(e),), warnings=tuple(map(str, skill.warnings))
        )
    return Validation(
        path=root,
        valid=True,
        name=skill.name,
        hash=f"sha256:{skill.hash}",
        warnings=tuple(map(str, skill.warnings)),
    )


def _list(catalog: Catalog, *, as_json: bool) -> int:
    if as_json:
        counts = catalog_tokens(catalog) if catalog.visible() else None
        declared = {e.name: _folder_tools(e) for e in catalog.entries}
        _print_json(
            {
                **msgspec.to_builtins(catalog.record),
                "catalog_tokens": counts,
                "tools": {n: t for n, t in declared.items() if t.offered or t.problem},
            }
        )
        return 0
    for e in catalog.entries:
        version = e.properties.metadata.get("version")
        tag = f", v{version}" if version else ""
        print(f"{_SYMBOL[e.status]} {visible(e.name)}  [{visible(e.source)}, {e.tier}{tag}]")
        print(f"    {visible(e.description[:100])}{'…' if len(e.description) > 100 else ''}")
        if e.reason:
            print(f"    {e.status}: {visible(e.reason)}")
        for w in e.warnings:
            print(f"    warning: {visible(str(w))}")
        tools = _folder_tools(e)
        if tools.problem is not None:
            print(f"    tools: {visible(tools.problem)}")
        elif tools.offered:
            names = ", ".join(t["name"] for t in tools.offered)
            print(f"    tools while active: {visible(names)}")
    for s in catalog.shadowed:
        print(f"shadowed: {visible(s.name)} from {visible(s.source)} (by {visible(s.by)})")
    for r in catalog.rejected:
        count = f"{len(r.problems)} problem{'s' if len(r.problems) != 1 else ''}"
        print(f"rejected: {visible(r.path)} ({count})")
        for p in r.problems:
            print(f"    {visible(str(p))}")
    for n in catalog.record.notes:
        print(f"note: {visible(n)}")
    if not (catalog.entries or catalog.rejected):
        print("no skills found")
    elif catalog.visible():
        tokens = "  ".join(f"{m} {n}" for m, n in catalog_tokens(catalog).items())
        shown = len(catalog.visible())
        print(f"catalog tokens by catalog_mode ({shown} visible skills): {tokens}")
    return 0


class FolderTools(msgspec.Struct, frozen=True, kw_only=True):
    """The tools a skill's folder declares (``tools.yaml``), offered once it is active,
    or why they cannot be."""

    offered: tuple[dict[str, str], ...] = ()
    problem: str | None = None


def _folder_tools(e: CatalogEntry) -> FolderTools:
    if e.path is None:
        return FolderTools()  # an inline skill's tools are code
    try:
        tools = read_toolset(e.name, e.path)
    except ToolsetError as err:
        return FolderTools(problem=f"{err}; `skillog skills validate {e.path}` checks it")
    return FolderTools(
        offered=tuple(
            {"name": t.name, "description": t.description, "script": t.script} for t in tools
        )
    )


def catalog_tokens(catalog: Catalog) -> dict[str, int]:
    """The estimated tokens of ``<available_skills>`` in each catalog mode, for the
    visible skills (what a session started now would show, before predicates)."""
    # Imported here: the runtime's composer imports this package.
    from .._context import tokens_of
    from .._effects import skill_info
    from .._prompt import catalog_block

    infos = tuple(skill_info(catalog.indexed(e.name), False) for e in catalog.visible())
    modes = ("full", "compact", "names", "search")
    return {m: tokens_of(len(catalog_block(infos, False, m).encode())) for m in modes}


def _deps(catalog: Catalog, args: argparse.Namespace) -> int:
    e = catalog.entry(args.name)
    needs = parse_requires(e.properties.metadata.get("requires", ""))
    python = python_requirements(e.properties.metadata)
    state = env_state(python) if python else None
    if args.install and state is not None:
        if e.tier in (Tier.USER, Tier.THIRD_PARTY) and not args.yes:
            question = (
                f"install {' '.join(python)} for {e.name} ({e.tier}) from the package index "
                "(network for pip only)?"
            )
            if not sys.stdin.isatty():
                print(
                    visible(f"skillog skills deps: {question} needs an answer: pass --yes"),
                    file=sys.stderr,
                )
                return 2
            if input(visible(question) + " [y/N] ").strip().lower() not in ("y", "yes"):
                print("not installed", file=sys.stderr)
                return 1
        with _progress("installing", args.json):
            record = build_env(python)
        _record_env(e.name, record, args.db or default_db())
        state = env_state(python)
    env: dict[str, object] | None = None
    lines = [f"{e.name}: {e.status}" + (f" ({e.reason})" if e.reason else "")]
    lines += [f"  {n.kind}: {n.spec}" for n in needs] or ["  no requirements"]
    if state is not None:
        problem = check_env(state) if state.record is not None else None
        lock = list(state.record.lock) if state.record is not None else []
        built = state.record is not None and problem is None
        env = {"key": state.key, "path": state.path, "built": built, "problem": problem}
        env["lock"] = lock
        said = "built" if built else (problem or "not built")
        lines.append(f"  environment {state.key[:12]}: {said}")
        lines += [f"    {pin}" for pin in lock]
    data = {"name": e.name, "needs": [{"kind": n.kind, "spec": n.spec} for n in needs], "env": env}
    _out(args.json, data, "\n".join(lines))
    return 0


def _record_env(name: str, record: EnvRecord, db: str) -> None:
    # Imported here: the runtime's event catalog imports this package.
    import trio

    from .._catalog import open_log
    from .._index_log import record_env_built

    async def append() -> None:
        async with open_log(db) as store:
            event = await record_env_built(store, name, record)
        print(f"recorded the lock as {event.stream} seq {event.seq}", file=sys.stderr)

    trio.run(append)


def _search(catalog: Catalog, query: str, limit: int, path: str | None, *, as_json: bool) -> int:
    """Search as the ``skills.search`` tool does, over the same table: the index file's
    (rows the table lacks inserted, as a session would), in memory with ``--no-index``."""
    if not 1 <= limit <= 100:
        print(f"skillog skills search: --limit must be 1 to 100, not {limit}", file=sys.stderr)
        return 2
    skills = [catalog.indexed(e.name) for e in catalog.visible()]
    docs = [search_doc(s.name, s.description, s.properties.metadata, s.headings) for s in skills]
    try:
        index = SkillSearch(docs, path=path)
    except sqlite3.Error as e:
        raise SkillIndexError(
            f"{path}: cannot use the skills search table ({e}); pass --no-index to search "
            "in memory, or point --db at another file"
        ) from e
    try:
        hits = index.search(query, limit=limit, among={s.name for s in skills})
    finally:
        index.close()
    rows = [{"name": h.name, "description": h.description} for h in hits]
    lines = [f"{h.rank}. {h.name}\n    {h.description[:100]}" for h in hits]
    _out(as_json, {"query": query, "results": rows}, "\n".join(lines) or "no matching skills")
    return 0


def _show(
    catalog: Catalog, name: str, trusted: frozenset[str], cfg_file: str, *, as_json: bool = False
) -> int:
    try:
        e = catalog.entry(name)
    except SkillNotFoundError:
        rejected = _rejected(catalog, name)
        if not rejected:
            raise
        if as_json:
            _print_json({"name": name, "rejected": rejected})
            return 1
        for r in rejected:
            count = f"{len(r.problems)} problem{'s' if len(r.problems) != 1 else ''}"
            print(f"✗ {visible(name)} (rejected: {count})")
            print(f"source: {visible(r.source)}\npath: {visible(r.path)}")
            for problem in r.problems:
                print(f"  {visible(str(problem))}")
        return 1
    check = check_signature(e.path, e.name, e.hash, trusted) if trusted else None
    if as_json:
        body = catalog.get(name).body if e.status is Status.ENABLED else None
        signature = (
            None if check is None else {"signed_by": check.signed_by, "detail": check.detail}
        )
        tools = _folder_tools(e)
        _print_json(
            {**msgspec.to_builtins(e), "body": body, "signature": signature, "tools": tools}
        )
        return 0
    reason = f": {visible(e.reason)}" if e.reason else ""
    print(f"{_SYMBOL[e.status]} {visible(e.name)} ({e.status}{reason})")
    print(f"id: {visible(e.id)}\nsource: {visible(e.source)}\ntier: {e.tier}")
    print(f"path: {visible(str(e.path))}\nhash: sha256:{e.hash}")
    props = e.properties
    for label, value in (
        ("version", props.metadata.get("version")),
        ("license", props.license),
        ("compatibility", props.compatibility),
        ("allowed-tools", props.allowed_tools),
        ("requires", props.metadata.get("requires")),
    ):
        if value is not None:
            print(f"{label}: {visible(value)}")
    if check is not None:
        print(f"signature: {'valid, ' if check.signed_by else ''}{visible(check.detail)}")
    if e.provenance:
        p = e.provenance
        ref = f" @ {visible(p.ref)}" if p.ref else ""
        print(f"origin: {visible(p.origin)} ({p.kind}{ref})")
    for w in e.warnings:
        print(f"warning: {visible(str(w))}")
    print(f"description: {visible(e.description)}")
    tools = _folder_tools(e)
    if tools.problem is not None:
        print(f"tools: {visible(tools.problem)}")
    for t in tools.offered:
        print(f"tool (while active): {visible(t['name'])} - {visible(t['description'])}")
    _print_mcp_unlocks(e.properties.allowed_tools, cfg_file)
    print()
    if e.status is Status.ENABLED:
        print(visible(catalog.get(name).body, lines=True), end="")
    return 0


def _print_mcp_unlocks(allowed_tools: str | None, cfg_file: str) -> None:
    """Which MCP servers' tools the skill's allowed-tools unlock (docs/mcp.md)."""
    from .._policy import mcp_unlocks  # the runtime's rules, read the same way

    if allowed_tools is None:
        return
    servers = {s.name for s in load_mcp_servers(cfg_file)}
    lines = mcp_unlocks(allowed_tools, servers)
    if lines:
        print("MCP tools its allowed-tools unlock:")
        for line in lines:
            print(f"  {visible(line)}")


def _rejected(catalog: Catalog, name: str) -> list[Rejected]:
    """The rejected skill directories named ``name`` (a rejected skill has no valid name)."""
    return [r for r in catalog.rejected if os.path.basename(r.path.rstrip("/")) == name]


def _toggle(
    name: str,
    enable: bool,
    catalog: Catalog,
    config: SkillsConfig,
    cfg_file: str,
    *,
    as_json: bool = False,
) -> int:
    # Enabling a name the config disables is always allowed: it cleans up a stale entry.
    if not (enable and name in config.disabled):
        if _rejected(catalog, name) and name not in {e.name for e in catalog.entries}:
            raise SkillNotFoundError(
                f"the skill {name!r} was rejected, so there is nothing to "
                f"{'enable' if enable else 'disable'}; `skillog skills show {name}` says why"
            )
        catalog.entry(name)  # SkillNotFoundError (exit 2) for a name no source has
    disabled = [n for n in config.disabled if n != name]
    if not enable:
        disabled.append(name)
    new = msgspec.structs.replace(config, disabled=tuple(disabled))
    save_config(cfg_file, new)
    action = "enabled" if enable else "disabled"
    reason = filter_reason(name, new) if enable else None
    _out(as_json, {"name": name, "enabled": enable, "note": reason}, f"{action} {name}")
    if reason is not None and not as_json:
        print(f"note: {visible(name)} is still disabled: {visible(reason)}", file=sys.stderr)
    return 0
