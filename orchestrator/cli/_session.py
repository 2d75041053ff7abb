"""``skillog run``, ``skillog sessions`` and ``skillog resume``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

import msgspec
import trio

from eventlog import (
    DB_HELP,
    EventStore,
    SkillogError,
    closing,
    default_db,
    describe_db,
    inert_json,
    is_postgres_url,
    open_store,
    sqlite_path,
    visible,
)
from eventlog import (
    Event as StoredEvent,
)
from eventlog._catalog import DEFAULT_LIMIT, Listing

from .._catalog import catalog_current, open_log
from .._effects import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    Elicitor,
    McpProgress,
)
from .._events import (
    CODEC,
    Event,
    PolicyConfig,
    SessionEnded,
    SessionStarted,
    SessionSuspended,
)
from .._fleet import LeaseHeldError, driver_name, holder, leased, session_config
from .._loop import Agent
from .._model import Delta
from .._policy_config import load_policy
from .._session_list import STATES, session_rows
from .._transcript import transcript
from ..skills import (
    Catalog,
    Skill,
    SkillIndex,
    SkillIndexError,
    SkillsConfig,
    SkillSource,
    SkillWatcher,
    Tier,
    build_catalog,
    config_path,
    default_sources,
    load_config,
    load_mcp_servers,
    load_model_config,
    split_skill_dirs,
    trusted_signers,
)
from ._prompts import Terminal, TerminalApprovals, TerminalForms


def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=default_db(), help=DB_HELP)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of run / sessions / resume (one parser per command)."""
    add_db(parser)
    command = parser.prog.split()[-1]
    if command == "sessions":
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
        parser.add_argument(
            "--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
            help=f"the N most recent sessions (default: {DEFAULT_LIMIT})",
        )  # fmt: skip
        parser.add_argument("--all", action="store_true", help="every session, however many")
        parser.add_argument(
            "--status", action="append", default=[], choices=STATES,
            help="only sessions in this state (repeatable)",
        )  # fmt: skip
        parser.add_argument(
            "--since", metavar="DATE",
            help="only sessions started at or after DATE (YYYY-MM-DD or ISO 8601, UTC)",
        )  # fmt: skip
        parser.add_argument(
            "--search", metavar="TEXT", help="only sessions whose task contains TEXT (any case)"
        )
        return
    if command == "run":
        parser.add_argument("task", help="what to ask the agent")
    elif command == "submit":
        parser.add_argument("tasks", nargs="+", metavar="TASK", help="one session per task")
    else:
        parser.add_argument("session", help="the session id (see `skillog sessions`)")
        parser.add_argument(
            "--wait",
            action="store_true",
            help="when another driver (a worker, serve, another resume) holds the session's "
            "lease, wait until it lets the session go or its lease expires, instead of "
            "refusing",
        )
    parser.add_argument(
        "--model",
        required=command in ("run", "submit"),
        help="anthropic:MODEL, openai:MODEL or scripted:FILE (API keys from the environment); "
        "resume defaults to the session's provider and model",
    )
    parser.add_argument(
        "--skills",
        action="append",
        default=[],
        metavar="DIR",
        help="a skill directory or a folder of skills (repeatable), on top of the configured "
        "and conventional sources",
    )
    parser.add_argument(
        "--tier",
        default="user",
        choices=[t.value for t in Tier],
        help="trust tier of --skills directories (default: user)",
    )
    parser.add_argument("--project", default=".", help="project directory for .agents/skills")
    add_catalog_options(parser)
    decide = parser.add_mutually_exclusive_group()
    decide.add_argument("--approve", action="store_true", help="approve every approval request")
    decide.add_argument("--deny", action="store_true", help="deny every approval request")
    parser.add_argument("--max-turns", type=turn_bound, default=50, help="turn bound (default: 50)")
    add_policy_arguments(parser)
    parser.add_argument(
        "--file-access",
        action="store_true",
        help="show skill locations to the model (for agents that can read files)",
    )


def add_catalog_options(parser: argparse.ArgumentParser) -> None:
    """How a session's catalog is shown and kept current (run, resume, submit, worker,
    serve); unset, the ``skills:`` section of the configuration decides."""
    parser.add_argument(
        "--compact-catalog-over",
        type=int,
        metavar="N",
        help="list skills one line each when there are more than N "
        "(default: skills.compact_catalog_over, 50)",
    )
    parser.add_argument(
        "--catalog-mode",
        choices=["full", "compact", "names", "search"],
        help="how the model sees the catalog: full descriptions, compact one-liners, names "
        "only, or search (no list); any of them offers skills.search and skills.list "
        "(default: skills.catalog_mode, else full and compact over --compact-catalog-over)",
    )
    parser.add_argument(
        "--watch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rescan the skill sources between turns and record what changed "
        "(default: skills.watch, off)",
    )
    parser.add_argument(
        "--context-window",
        type=int,
        metavar="TOKENS",
        help="the model's context window, recorded by the sessions started (default: "
        "model.context_window, else the window of a known model, else unknown: compaction "
        "only after the provider refuses a request as too long; docs/context.md)",
    )
    parser.add_argument(
        "--tokenizer",
        choices=["bytes", "tiktoken", "auto"],
        help="how the sessions started estimate tokens for the context budget: a quarter "
        "of the bytes, tiktoken (pip install 'skillog[tiktoken]'), or tiktoken where it "
        "loads else bytes; recorded (default: model.tokenizer, bytes)",
    )
    parser.add_argument(
        "--instructions",
        choices=["system", "results"],
        help="where the sessions started show the active skills' instructions: the system "
        "prompt, or only the skills.load results (the prompt's prefix stays cached when "
        "skills change); recorded (default: model.instructions, system; docs/context.md)",
    )


def turn_bound(text: str) -> int:
    """``--max-turns``: a whole number of turns, at least 1 (argparse makes a bad one exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of turns: give a whole number of at least 1, e.g. 50"
        )
    return value


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """--policy-profile and --policy (run, submit, serve; resume refuses them)."""
    parser.add_argument(
        "--policy-profile",
        metavar="NAME",
        help="the policy profile of the configuration file to use (policy.profiles.NAME); "
        "overrides policy.profile",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one policy key over the configuration and the profile (repeatable): a "
        "dotted key and a YAML value, e.g. script_timeout_ms=60000, network=[org], "
        "skills.pdf.network=true, script_limits.cpu_s=null (docs/policy.md)",
    )


def session_policy(args: argparse.Namespace) -> PolicyConfig:
    """The policy a new session from these arguments runs under: defaults < the
    configuration file's ``policy:`` < the profile < ``--policy`` (docs/policy.md)."""
    return load_policy(config_path(), profile=args.policy_profile, sets=args.policy)


def run(args: argparse.Namespace) -> int:
    command = {"run": _run, "sessions": _sessions, "resume": _resume}[args.command]
    return trio.run(command, args)


def progress_line(server: str, progress: str, total: str | None, message: str | None) -> str:
    """An MCP call's progress notification as the terminal shows it (``skillog run``,
    ``skillog submit --follow``), made inert: ``[server: 2.0/4.0 message]``."""
    of = f"/{total}" if total is not None else ""
    text = f"{server}: {progress}{of}"
    if message:
        text += f" {message}"
    return visible(f"[{text}]")


class LiveText:
    """What ``skillog run`` shows while the model answers, on a terminal: its text as
    it arrives (made inert like everything printed), each answer ended by a line break
    when its ``model.responded`` is recorded; MCP calls' progress, a line each. The
    transcript printed at the end, from the log, is the record."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.open = False

    def delta(self, delta: Delta) -> None:
        if delta.kind == "text" and delta.text:
            self.out.write(visible(delta.text, lines=True))
            self.out.flush()
            self.open = True

    def progress(self, progress: McpProgress) -> None:
        # An MCP call's progress as it arrives, on a line of its own.
        line = progress_line(progress.server, progress.progress, progress.total, progress.message)
        self.out.write(("\n" if self.open else "") + line + "\n")
        self.out.flush()
        self.open = False

    def event(self, event: StoredEvent) -> None:
        if self.open and event.type.startswith("model."):
            self.out.write("\n")
            self.out.flush()
            self.open = False


async def _run(args: argparse.Namespace) -> int:
    agent = agent_for(args, model_spec=args.model, policy=session_policy(args))
    if sys.stderr.isatty():  # the live text beside: stdout stays the transcript
        live = LiveText(sys.stderr)
        agent.on_delta, agent.observers = live.delta, [*agent.observers, live.event]
        agent.on_progress = live.progress
    try:
        async with open_log(args.db) as store:
            session_id = uuid.uuid4().hex
            async with leased(store, session_id, driver_name("run")) as lease:
                session = await agent.run(store, args.task, session_id=session_id)
                lease.outcome = _outcome(session.state.status)
            return await _report(store, session.id)
    finally:
        agent.close()


async def _resume(args: argparse.Namespace) -> int:
    if args.policy or args.policy_profile:
        raise SkillogError(
            "a session keeps the policy recorded when it started (session.started; "
            "`skillog policy --session ID` shows it): --policy and --policy-profile apply "
            "to new sessions only"
        )
    async with open_log(args.db) as store:
        started = await _started(store, args.session)
        if started.provider == "mcp":
            held = await holder(store, args.session, time.time_ns())
            if held is not None:
                raise LeaseHeldError(args.session, *held, time.time_ns())
            raise SkillogError(
                f"session {args.session} was an MCP client's connection to `skillog mcp "
                "serve`, whose server stopped before it ended; the client is gone, so it "
                "cannot be resumed: its log stands as recorded (`skillog replay` works on it)"
            )
        ended = await _ended(store, args.session)
        if ended is not None:
            raise SkillogError(
                f"session {args.session} has ended ({ended.reason}, after "
                f"{ended.turns} turns) and cannot be resumed; start a new one with "
                f"`skillog run`, or fork it to go on from an earlier point: `skillog replay "
                f"{args.session} --fork-at SEQ` (SEQ from `skillog replay {args.session} "
                "--timeline`), then `skillog resume` the new session"
            )
        agent = agent_for(args, model_spec=args.model or f"{started.provider}:{started.model}")
        try:
            driver = driver_name("resume")
            async with leased(store, args.session, driver, wait=args.wait) as lease:
                bodies = await read_bodies(store, args.session)
                if isinstance(bodies[-1], SessionEnded):  # its driver (waited for) ended it
                    lease.outcome = "already ended"
                else:
                    session = await agent.resume(store, args.session)
                    lease.outcome = _outcome(session.state.status)
            return await _report(store, args.session)
        finally:
            agent.close()


def _outcome(status: str) -> str:
    """What a driver's release records for a session left at ``status``."""
    return "ended" if status == "ended" else "suspended"


async def _sessions(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise SkillogError(f"--limit {args.limit}: give 1 or more (or --all)")
    limit = None if args.all else args.limit
    listing = Listing(
        limit=None if limit is None else limit + 1,  # one more: is there more?
        status=tuple(args.status),
        since=parse_since(args.since) if args.since else None,
        search=args.search or None,
    )
    async with open_store(args.db, readonly=True) as store:
        rows = await session_rows(store, listing)
        if not await catalog_current(store):
            print(
                f"(no current session catalog in {describe_db(args.db)}, which is from "
                "before it, was written without it or by another version of skillog: "
                "listed by reading the whole log; `skillog log reindex` (or any run or "
                "worker) builds it once, then listings read the index)",
                file=sys.stderr,
            )
    more = limit is not None and len(rows) > limit
    rows = rows[:limit]
    if more:
        print(
            f"(the {limit} most recent shown; --limit N or --all for more)",
            file=sys.stderr,
        )
    if args.json:
        for row in rows:
            print(inert_json(msgspec.json.encode(row).decode()))
        return 0
    if not rows:
        print(f"no sessions in {describe_db(args.db)}")
        return 0
    print(f"{'SESSION':<34} {'STARTED (UTC)':<20} {'MODEL':<28} {'TURNS':>5} {'EVENTS':>6}  STATUS")
    for r in rows:
        notes = [r.status, r.parent] if r.parent else [r.status]
        if r.workers:
            notes.append(f"by {', '.join(r.workers)}")
        print(
            f"{visible(r.session):<34} {r.started:<20} {visible(r.model[:28]):<28} "
            f"{r.turns:>5} {r.events:>6}  " + visible("  ".join(notes))
        )
    return 0


def parse_since(text: str) -> int:
    """``--since``/``?since=``: a date or ISO 8601 time (UTC unless it says) as ns."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as e:
        raise SkillogError(
            f"--since {text!r}: not a date; write YYYY-MM-DD or an ISO 8601 time "
            "(2026-01-31T12:00:00)"
        ) from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000_000


async def read_bodies(store: EventStore, session_id: str) -> list[Event]:
    return [CODEC.decode(e) async for e in store.read(session_id)]


async def _report(store: EventStore, session_id: str) -> int:
    """Print the transcript from the log; exit 0 when the session completed or waits
    for approvals (a suspended session is not a failure), 1 otherwise."""
    bodies = await read_bodies(store, session_id)
    for line in transcript(bodies):
        print(visible(line))
    last = bodies[-1]
    if isinstance(last, SessionSuspended):
        print(
            f"\nsession {session_id} is waiting for approval: `skillog approvals`, then "
            f"`skillog approve|deny {session_id} CALL` and `skillog resume {session_id}`"
        )
        return 0
    return 0 if isinstance(last, SessionEnded) and last.reason == "completed" else 1


async def _started(store: EventStore, session_id: str) -> SessionStarted:
    started = await session_config(store, session_id)
    if started is None:
        raise SkillogError(f"no session {session_id!r} in this database; `skillog sessions`")
    return started


async def _ended(store: EventStore, session_id: str) -> SessionEnded | None:
    """The session's ``session.ended``, which is its last event, or None."""
    head = await store.head(session_id)
    if head is None:
        return None
    async with closing(store.read(session_id, from_seq=head.seq)) as events:
        async for event in events:
            body = CODEC.decode(event)
            return body if isinstance(body, SessionEnded) else None
    return None


def agent_for(
    args: argparse.Namespace,
    *,
    model_spec: str,
    policy: PolicyConfig | None = None,
    skills: DiscoveryCache | None = None,
) -> Agent:
    """The agent the session commands (and workers) build from their arguments, with
    ``policy`` for the sessions it starts (a resumed session keeps its recorded one);
    its skills from ``skills`` when given (a long-running service's), else indexed now."""
    from ..adapters import adapter_from_spec

    model = adapter_from_spec(model_spec)
    cfg_file = config_path()
    config = load_config(cfg_file)
    model_config = load_model_config(cfg_file)
    found = (
        skills.get()
        if skills is not None
        else discover(
            args.skills,
            Tier(args.tier),
            project=args.project,
            config=config,
            db=args.db,
            lazy_install=policy is not None and policy.lazy_install == "ask",
        )
    )
    compact = getattr(args, "compact_catalog_over", None)
    watch = getattr(args, "watch", None)
    terminal = cli_terminal()
    return Agent(
        model=model,
        model_name=model_spec.split(":", 1)[1],
        skills=found.skills,
        hidden=found.hidden,
        approver=cli_approver(args.approve, args.deny, terminal),
        elicitor=cli_elicitor(terminal),
        max_turns=args.max_turns,
        file_access=args.file_access,
        policy=policy or PolicyConfig(),
        compact_catalog_over=config.compact_catalog_over if compact is None else compact,
        catalog_mode=getattr(args, "catalog_mode", None) or config.catalog_mode or "",
        watch=found.watcher() if (config.watch if watch is None else watch) else None,
        trusted_signers=trusted_signers(config, cfg_file),
        indexed=found.catalog.record,
        search_db=None if not args.db or is_postgres_url(args.db) else sqlite_path(args.db),
        mcp_servers=load_mcp_servers(config_path()),
        context_window=getattr(args, "context_window", None) or model_config.context_window,
        tokenizer=getattr(args, "tokenizer", None) or model_config.tokenizer,
        instructions_mode=getattr(args, "instructions", None) or model_config.instructions,
    )


@dataclass(frozen=True)
class Discovered:
    """What a session's indexing found: the visible skills, the (name, reason) of
    those hidden from the model, the catalog, and how to rescan the same sources."""

    skills: list[Skill]
    hidden: list[tuple[str, str]]
    catalog: Catalog
    sources: list[SkillSource]
    refs: list[str]
    tier: Tier
    config: SkillsConfig

    def watcher(self) -> SkillWatcher:
        return SkillWatcher(self.sources, config=self.config, refs=self.refs, ref_tier=self.tier)


def discover(
    dirs: Sequence[str],
    tier: Tier,
    *,
    project: str,
    config: SkillsConfig | None = None,
    db: str | None = None,
    lazy_install: bool = False,
) -> Discovered:
    """The configured and conventional sources plus ``dirs``, indexed: with a SQLite
    ``db``, through its persistent skills index, so a warm start stats the skills'
    files instead of reading and hashing them (a PostgreSQL log keeps no index).
    ``lazy_install``: the sessions' policy builds a missing ``python:`` environment on
    approval, so a skill lacking one is offered (``build_catalog``)."""
    config = config if config is not None else load_config(config_path())
    refs, folders = split_skill_dirs(dirs, tier)
    sources = [*folders, *default_sources(config, project=project)]
    index = _skill_index(db)
    try:
        servers = [s.name for s in load_mcp_servers(config_path())]
        catalog = build_catalog(
            sources,
            config=config,
            refs=refs,
            ref_tier=tier,
            index=index,
            mcp_servers=servers,
            lazy_install=lazy_install,
        )
    finally:
        if index is not None:
            index.close()
    for rejected in catalog.rejected:
        skipped = f"skipped {rejected.path}: {rejected.problems[0]}"
        print(visible(skipped), file=sys.stderr)
    shown = catalog.visible()
    hidden = [(e.name, f"{e.status}: {e.reason}") for e in catalog.entries if e not in shown]
    return Discovered(
        # From the index: a skill is read and hashed again when a session loads it.
        skills=[catalog.indexed(e.name) for e in shown],
        hidden=hidden,
        catalog=catalog,
        sources=sources,
        refs=refs,
        tier=tier,
        config=config,
    )


class DiscoveryCache:
    """The skills of a long-running process (``serve``, ``worker``), indexed when it
    starts and again only when something that decides the catalog changed: the
    configuration file, or a folder the sources' search listed (a skill added, removed
    or renamed changes its folder's mtime, at any depth: ``plugins/*/skills/<name>``),
    checked by one stat each per session, not a scan. A skill edited in place is still
    caught when a session loads it (re-read and hashed, ``skill.changed``)."""

    def __init__(self, args: argparse.Namespace, *, lazy_install: bool = False) -> None:
        self._args = args
        self.lazy_install = lazy_install  # discover's: offers skills missing their env
        self._lock = threading.Lock()
        self._found: Discovered | None = None
        self._stamp: tuple[object, ...] = ()
        self.scans = 0

    def get(self) -> Discovered:
        with self._lock:
            found = self._found
            if found is None or self._stamps(found) != self._stamp:
                args = self._args
                found = discover(
                    args.skills,
                    Tier(args.tier),
                    project=args.project,
                    db=args.db,
                    lazy_install=self.lazy_install,
                )
                self._found, self._stamp = found, self._stamps(found)
                self.scans += 1
            return found

    @staticmethod
    def _stamps(found: Discovered) -> tuple[object, ...]:
        # Every folder the search listed, not only the sources' tops: a skill added in
        # plugins/*/skills/ changes that folder's mtime. One stat each.
        paths = [config_path(), *(s.path for s in found.sources), *found.catalog.listed]
        return tuple(_stat(p) for p in dict.fromkeys([*paths, *found.refs]))


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_size)


def _skill_index(db: str | None) -> SkillIndex | None:
    """The skills index in the log's SQLite file; None (scan everything, as without
    one) for a PostgreSQL log or an index that cannot be used, which is only a cache."""
    if not db or is_postgres_url(db):
        return None
    try:
        return SkillIndex(sqlite_path(db))
    except SkillIndexError as e:
        print(visible(f"skills index not used: {e}"), file=sys.stderr)
        return None


def cli_approver(approve: bool, deny: bool, terminal: Terminal | None) -> Approver | None:
    """--approve / --deny, else ask on the terminal (withdrawn when `skillog approve` or
    `deny` from another process decides first), else nobody: the session suspends
    until `skillog approve`/`deny` decide from any process."""
    if approve:
        return _fixed(True, "--approve")
    if deny:
        return _fixed(False, "--deny")
    return None if terminal is None else TerminalApprovals(terminal)


def cli_terminal() -> Terminal | None:
    """Standard input when it is a terminal: where approvals and forms are asked."""
    return Terminal() if sys.stdin.isatty() else None


def cli_elicitor(terminal: Terminal | None) -> Elicitor | None:
    """An MCP server's form, asked on the terminal field by field and withdrawn when an
    answer from another process holds first (``_prompts``); nobody without one (the
    form then waits for an answer through the log)."""
    return None if terminal is None else TerminalForms(terminal)


def _fixed(approved: bool, by: str) -> Approver:
    async def decide(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=approved, decided_by=by)

    return decide


async def stop_on_signals(stop: trio.Event, who: str, doing: str) -> None:
    """Set ``stop`` at the first SIGTERM or SIGINT, saying ``who: SIG: doing`` on stderr,
    then stop listening: a second signal interrupts (``serve``, ``mcp serve``; a
    worker keeps listening while it drains, ``cli/_fleet``)."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            print(f"{who}: {signal.Signals(signum).name}: {doing}", file=sys.stderr, flush=True)
            stop.set()
            return
