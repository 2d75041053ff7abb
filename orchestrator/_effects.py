"""The runtime's side effects behind one interface.

Everything a session does to the world beyond its log goes through :class:`Effects`:
loading a skill from its source, running a script, calling a host tool, asking for an
approval. Live sessions use :class:`LiveEffects`; replay's re-drive substitutes one that
answers from the recorded log (like Temporal's replayer), so the same runtime code
runs both.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import msgspec
import trio

from eventlog import EventStore, SkillogError

from ._events import (
    McpFormAnswered,
    McpRoot,
    McpServerFailed,
    McpToolsListed,
    SkillChanged,
    SkillInfo,
    ToolDef,
)
from ._forms import FormWait
from ._host_tools import HostTool, ToolContext, ToolOutcome
from ._model import ModelAdapter, ModelError, ModelRequest, ModelResponse
from ._state import ActiveSkill
from ._visibility import Predicate, RefreshContext, catalog_changes, visible
from .scripts import ScriptRequest, ScriptResult, WorkdirError, materialize, run_script
from .skills import (
    EnvRecord,
    InlineSkill,
    Skill,
    SkillManifest,
    SkillSearch,
    SkillWatcher,
    Status,
    ToolsetError,
    TriggerError,
    Triggers,
    build_env,
    check_env,
    check_signature,
    env_state,
    load_skill,
    parse_toolset,
    parse_triggers,
    python_requirements,
    search_doc,
    snapshot_skill,
)


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What the embedding program is asked to approve: the session and call, the tool,
    the concrete action (``run scripts/x.py a b``, ``call send_email with {...}``), the
    call's arguments as the model sent them, the skill and its trust tier (scripts),
    the script's path and arguments, the skill's content hash, and when the request
    expires (ns since the epoch, None for never)."""

    session_id: str
    call_id: str
    tool: str
    action: str
    skill: str | None = None
    tier: str | None = None
    arguments: str = ""
    expires_at: int | None = None
    path: str | None = None
    args: tuple[str, ...] = ()
    skill_hash: str | None = None
    install: tuple[str, ...] = ()


class ApprovalDecision(msgspec.Struct, frozen=True, kw_only=True):
    """An approver's answer; ``decided_by`` names who decided (recorded). ``remember``
    makes an approval stick for the rest of the session: ``skill`` (every call of this
    skill, as loaded now) or ``pattern:RULE`` (the calls one ``allowed-tools`` rule
    matches; it must match this call), recorded as ``approval.remembered``."""

    approved: bool
    decided_by: str
    reason: str | None = None
    remember: str | None = None


Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision | None]]
"""Answers an approval request, or None for "later": the session then suspends
(``awaiting_approval``) until a decision is recorded from any process."""


async def deny_all(request: ApprovalRequest) -> ApprovalDecision:
    """An approver that approves nothing."""
    return ApprovalDecision(approved=False, decided_by="deny_all")


class InterruptedCall(msgspec.Struct, frozen=True, kw_only=True):
    """An at-most-once call that may or may not have taken effect before the process
    running it stopped, handed to a :data:`Reconciler` on resume."""

    session_id: str
    call_id: str
    tool: str
    arguments: str


Reconciler = Callable[[InterruptedCall], Awaitable[ToolOutcome | None]]
"""Finds out what an interrupted call really did (say, by asking the outside system
with the call's idempotency key) and returns its outcome, recorded as reconciled; None
leaves it ``tool.interrupted``."""


@dataclass(frozen=True)
class LoadedSkill:
    """A skill read from its source, with every file's bytes for the blob store."""

    skill: Skill
    manifest: SkillManifest
    blobs: tuple[bytes, ...]
    tools: tuple[ToolDef, ...] = ()
    signed_by: str | None = None

    def info(self, file_access: bool) -> SkillInfo:
        return skill_info(
            self.skill,
            file_access,
            tools=tuple(t.name for t in self.tools),
            signed_by=self.signed_by,
        )


class SkillUnavailableError(SkillogError):
    """A skill could not be loaded from its source (gone, unreadable or now invalid)."""


class McpOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one MCP tool call came to: ``content``, the text the model reads (capped);
    ``stored``, the result as MCP returned it (canonical JSON, cut to the stored cap
    when ``truncated``; ``size`` is the full size); ``failure`` when the server gave no
    result (``timeout``, ``disconnected``, ``unavailable``, ``protocol``); ``notes``
    what the server said besides while it ran (recorded as ``mcp.result.notes``)."""

    content: str
    stored: bytes
    size: int
    is_error: bool = False
    truncated: bool = False
    duration_ms: int = 0
    failure: str | None = None
    notes: bytes = b""
    """What the server said besides during the call (progress, log messages): canonical
    JSON, empty when nothing."""


@dataclass(frozen=True)
class McpTask:
    """How to call an MCP tool that runs only as a task: ``task_id`` is the task the
    log already names for the call (a resumed call polls it), None to create one;
    ``created(task_id, ttl_ms)`` commits the id the server gave before the result is
    asked for; ``effect``, the tool's class (what a lost task's outcome advises)."""

    task_id: str | None
    created: Callable[[str, int | None], Awaitable[None]]
    effect: str = "at-most-once"


McpStatus = McpToolsListed | McpServerFailed
"""What the log last says of an MCP server: its listing, or that it failed."""


def mcp_gone(recorded: Mapping[str, McpStatus], connected: Collection[str]) -> list[McpStatus]:
    """A failure for each server the log lists tools of that this process does not
    connect (a session resumed with other servers): its tools are withdrawn."""
    return [
        McpServerFailed(server=name, stage="connect", error="not among this process's MCP servers")
        for name in sorted(recorded)
        if isinstance(recorded[name], McpToolsListed) and name not in connected
    ]


class ElicitationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A form an MCP server asks a human to fill during the call ``call_id``
    (``elicitation/create``): its ``message`` and ``schema`` (the ``requestedSchema``,
    a flat JSON Schema object as canonical JSON text); ``params`` the digest of the
    request's parameters as recorded in ``mcp.elicited`` (what an answer kept in the
    log is matched on)."""

    session_id: str
    call_id: str
    server: str
    message: str
    schema: str
    params: str = ""


class ElicitationAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """A human's answer to a form: ``accept`` with ``content`` (the values, a JSON
    object as text), ``decline`` or ``cancel``; ``decided_by`` names who answered;
    ``answer`` the hash of the ``mcp.form_answered`` event it came from, when it came
    through the log from another process."""

    action: Literal["accept", "decline", "cancel"]
    decided_by: str
    content: str | None = None
    answer: str = ""


Elicitor = Callable[[ElicitationRequest], Awaitable[ElicitationAnswer | None]]
"""Asks a human to fill an MCP server's form, or None when nobody in this process can
(the form then waits for an answer through the log, ``skillog approvals answer``).
It races the log: an answer given meanwhile from another process cancels the question,
and an elicitor with a ``withdrawn(request, answer)`` method is told what was taken
(also when its own answer came second, or the form timed out)."""


def _withdraw(
    elicitor: Elicitor | None, request: ElicitationRequest, taken: ElicitationAnswer
) -> None:
    """Tell an elicitor whose question no longer stands (answered elsewhere first, or
    timed out) what was taken instead, when it can be told (a ``withdrawn`` method)."""
    withdrawn = getattr(elicitor, "withdrawn", None)
    if withdrawn is not None:
        withdrawn(request, taken)


def _from_log(answer: McpFormAnswered, digest: str) -> ElicitationAnswer:
    return ElicitationAnswer(
        action=answer.action, decided_by=answer.decided_by, content=answer.content, answer=digest
    )


class McpProgress(msgspec.Struct, frozen=True, kw_only=True):
    """A progress notification of an MCP call as it arrives, for observers only: never
    recorded, never hashed (the call's ``mcp.result.notes`` keeps the last ones).
    ``progress`` and ``total`` are the server's numbers as decimal text."""

    session_id: str
    call_id: str
    server: str
    progress: str
    total: str | None = None
    message: str | None = None


ProgressSink = Callable[[McpProgress], None]
"""Receives MCP progress notifications live (``Agent(on_progress=...)``)."""


class ServerRequests(Protocol):
    """What an MCP server may ask the client while one of its calls runs, answered by
    the runtime (``_mcp_sampling``) and recorded in the call's session."""

    async def sample(self, params: bytes) -> tuple[bytes | None, str | None]:
        """A ``sampling/createMessage`` request (its parameters as canonical JSON):
        the result to send (canonical JSON), or the error message to answer with."""
        ...

    async def elicit(self, params: bytes) -> tuple[bytes | None, str | None]:
        """An ``elicitation/create`` request, answered likewise."""
        ...

    def progress(self, progress: str, total: str | None, message: str | None) -> None:
        """A progress notification of the call, passed on live (not recorded)."""
        ...


class McpClients(Protocol):
    """The session's MCP servers, connected (``orchestrator.mcp``)."""

    async def set_roots(self, roots: Mapping[str, tuple[McpRoot, ...]]) -> None: ...

    async def changes(self, recorded: Mapping[str, McpStatus]) -> list[McpStatus]: ...

    async def call(
        self,
        server: str,
        tool: str,
        arguments: str,
        context: ToolContext,
        *,
        stored_cap: int,
        model_cap: int,
        requests: ServerRequests | None = None,
        task: McpTask | None = None,
    ) -> McpOutcome: ...


class Effects(Protocol):
    async def load_skill(self, name: str) -> LoadedSkill: ...

    async def run_script(
        self, skill: ActiveSkill, request: ScriptRequest, get_blob: GetBlob
    ) -> ScriptResult: ...

    async def call_tool(self, name: str, arguments: str, context: ToolContext) -> ToolOutcome: ...

    async def env_missing(self, requirements: tuple[str, ...], call_id: str) -> bool:
        """Whether the environment for ``requirements`` must be installed before call
        ``call_id``'s script runs (not built, or no longer what was built)."""
        ...

    async def install_env(self, requirements: tuple[str, ...], call_id: str) -> EnvRecord:
        """Build the environment for ``requirements`` (network for the installer
        only); :class:`~orchestrator.skills.DependencyError` when it cannot."""
        ...

    async def approve(self, request: ApprovalRequest) -> ApprovalDecision | None: ...

    def approval_withdrawn(self, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        """Another process decided ``request`` first: the approver's question is over."""
        ...

    async def refresh(self, context: Callable[[], RefreshContext]) -> Sequence[SkillChanged]:
        """Between turns: the catalog changes to record (``context``: the session's,
        built when something is to be asked)."""
        ...

    async def search_skills(
        self, query: str, limit: int, among: Collection[str], call_id: str
    ) -> str:
        """``skills.search``: the ranked matches among ``among`` as JSON text."""
        ...

    async def mcp_changes(self, recorded: Mapping[str, McpStatus]) -> list[McpStatus]:
        """What the MCP servers offer now that the log (``recorded``) does not say yet:
        a listing per server that connected or changed its tools, a failure per server
        that became unusable. Recorded before the next prompt."""
        ...

    async def elicit(
        self, request: ElicitationRequest, *, index: int, timeout_ms: int
    ) -> ElicitationAnswer | None:
        """A human's answer to an MCP server's form (the ``index``-th of the call): one
        kept in the log for the same form, the elicitor's, or one given through the
        log by another process; None when nobody can answer, ``cancel`` by ``timeout``
        when nobody did within ``timeout_ms``."""
        ...

    def mcp_progress(self, progress: McpProgress) -> None:
        """Pass a progress notification on to the live observer, if any."""
        ...

    async def mcp_roots(self, roots: Mapping[str, tuple[McpRoot, ...]]) -> None:
        """Tell the MCP servers whose roots (as the log says them) changed."""
        ...

    async def sample(self, request: ModelRequest, *, call_id: str, index: int) -> ModelResponse:
        """The session's model's answer to an MCP server's sampling request (the
        ``index``-th of the call ``call_id``); raises :class:`ModelError`."""
        ...

    async def call_mcp(
        self,
        server: str,
        tool: str,
        arguments: str,
        context: ToolContext,
        *,
        stored_cap: int,
        model_cap: int,
        requests: ServerRequests | None = None,
        task: McpTask | None = None,
    ) -> McpOutcome: ...


GetBlob = Callable[[str], Awaitable[bytes]]


def skill_info(
    skill: Skill, file_access: bool, *, tools: tuple[str, ...] = (), signed_by: str | None = None
) -> SkillInfo:
    """The catalog entry of ``skill``: ``tools`` are the names of the tools loading it
    unlocks, ``signed_by`` the trusted key whose signature over its hash verified."""
    return SkillInfo(
        name=skill.name,
        description=skill.description,
        hash=skill.hash,
        tier=str(skill.tier),
        source=skill.source,
        location=skill.location if file_access else None,
        version=skill.properties.metadata.get("version"),
        tools=tools,
        signed_by=signed_by,
        summary=skill.properties.metadata.get("summary") or None,
        triggers=_triggers(skill),
    )


def _triggers(skill: Skill) -> Triggers | None:
    # A malformed declaration fires nothing; `skillog skills validate` says why.
    try:
        return parse_triggers(skill.properties.metadata)
    except TriggerError:
        return None


class _Collect:
    """A blob sink that keeps the bytes, so a snapshot commits with its event."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    async def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    async def get_blob(self, digest: str) -> bytes:
        return self.blobs[digest]


class LiveEffects:
    """Effects against the real world: skills from disk (or code), real scripts in the
    sandbox, the embedding program's tools and approver.

    Scripts run from a private copy of the skill exactly as it was snapshotted when
    loaded (its pinned hash), never from the live directory, so what runs is what the
    log recorded even if the folder changed since.
    """

    def __init__(
        self,
        skills: Sequence[Skill | InlineSkill],
        *,
        host_tools: Sequence[HostTool] = (),
        approver: Approver | None = None,
        bwrap: str | None = None,
        cache_dir: str | None = None,
        predicates: Mapping[str, Predicate] | None = None,
        watcher: SkillWatcher | None = None,
        trusted_signers: Collection[str] = (),
        search_db: str | None = None,
    ) -> None:
        self.skills: dict[str, Skill | InlineSkill] = {s.name: s for s in skills}
        self.predicates = dict(predicates or {})
        self.watcher = watcher
        self.trusted = frozenset(trusted_signers)
        # The sources' view (every skill, before visibility), kept between rescans.
        self._known: dict[str, SkillInfo] | None = None
        self._signature_details: dict[str, str] = {}
        self.tools: dict[str, HostTool] = {t.name: t for t in host_tools}
        # An inline skill's tools, made into host tools once; offered while it is loaded.
        self.inline_tools: dict[str, tuple[HostTool, ...]] = {
            s.name: _host_tools(s) for s in skills if isinstance(s, InlineSkill)
        }
        for tools in self.inline_tools.values():
            self.tools.update((t.name, t) for t in tools)
        self.approver = approver
        self.bwrap = bwrap
        # The connected MCP servers while a session runs (Agent.run / resume).
        self.mcp: McpClients | None = None
        # The session's model, for MCP servers' sampling requests (Agent sets it),
        # and who fills their forms (elicitation).
        self.model: ModelAdapter | None = None
        self.elicitor: Elicitor | None = None
        # The log a form waits on for an answer from another process (Agent sets it).
        self.forms_store: EventStore | None = None
        self.on_progress: ProgressSink | None = None
        # Private copies of skills for scripts: a shared cache_dir is safe across tasks
        # and processes (and kept); without one, a temporary directory removed on close.
        self.cache_dir = cache_dir
        self._workdir: str | None = None
        self._search: tuple[object, SkillSearch] | None = None  # (skills it indexed, index)
        self.search_db = search_db

    async def search_skills(
        self, query: str, limit: int, among: Collection[str], call_id: str
    ) -> str:
        index = await trio.to_thread.run_sync(self._search_index)
        hits = await trio.to_thread.run_sync(
            functools.partial(index.search, query, limit=limit, among=among)
        )
        rows = [{"name": h.name, "description": h.description} for h in hits]
        return msgspec.json.encode({"query": query, "results": rows}).decode()

    def _search_index(self) -> SkillSearch:
        """The search table of the current sources, built on first use and again after
        a rescan replaced them."""
        if self._search is None or self._search[0] is not self.skills:
            docs = [
                search_doc(s.name, s.description, s.properties.metadata, s.headings)
                for s in map(_as_skill, self.skills.values())
            ]
            if self._search is not None:
                self._search[1].close()
            self._search = (self.skills, SkillSearch(docs, path=self.search_db))
        return self._search[1]

    async def load_skill(self, name: str) -> LoadedSkill:
        source = self.skills.get(name)
        if source is None:
            raise SkillUnavailableError(f"skill {name!r} is not in this session's sources")
        if isinstance(source, InlineSkill):
            skill = source.to_skill()
            tools = tuple(t.definition() for t in self.inline_tools[name])
        else:
            if source.root is None:
                raise SkillUnavailableError(f"skill {name!r} has no directory to load from")
            skill = await trio.to_thread.run_sync(_reload, source)
            tools = ()
        sink = _Collect()
        manifest = await snapshot_skill(sink, source if isinstance(source, InlineSkill) else skill)
        if not isinstance(source, InlineSkill):
            tools = _folder_tools(skill.name, manifest, sink.blobs)
        return LoadedSkill(
            skill=skill,
            manifest=manifest,
            blobs=tuple(sink.blobs.values()),
            tools=tools,
            signed_by=self._signature(skill),
        )

    def catalog_infos(self, file_access: bool) -> list[SkillInfo]:
        """Every skill of the sources as the catalog shows it (signatures checked)."""
        if self._known is None:
            self._known = {s.name: self._info(s, file_access) for s in self.skills.values()}
        return list(self._known.values())

    def visible_catalog(
        self, context: RefreshContext
    ) -> tuple[dict[str, SkillInfo], list[tuple[str, str]]]:
        """What the session may see now, and what is hidden with the reason."""
        return visible(
            self.catalog_infos(context.file_access),
            self.predicates,
            context.skill_context,
            context.require_signatures,
            self._signature_details,
        )

    async def refresh(self, context: Callable[[], RefreshContext]) -> Sequence[SkillChanged]:
        """Between turns: rescan the sources (when watching) and ask the predicates
        again; the changes to the session's recorded catalog, to be recorded."""
        if self.watcher is None and not self.predicates:
            return ()
        now = context()
        self.catalog_infos(now.file_access)
        gone: dict[str, str] = {}
        if self.watcher is not None:
            gone = await self._rescan(now.file_access)
        wanted, hidden = self.visible_catalog(now)
        return catalog_changes(now.catalog, wanted, [*hidden, *gone.items()], gone)

    async def _rescan(self, file_access: bool) -> dict[str, str]:
        """Update the sources' view from a rescan; the names whose entry changed, with
        why a skill the sources no longer offer is gone."""
        assert self.watcher is not None and self._known is not None
        catalog = await self.watcher.scan_async()
        roots = {s.root: n for n, s in self.skills.items() if isinstance(s, Skill) and s.root}
        why = {
            roots[r.path]: f"now invalid: {r.problems[0]}"
            for r in catalog.rejected
            if r.path in roots
        }
        why.update((e.name, f"{e.status}: {e.reason}") for e in catalog.entries if e.reason)
        found: dict[str, Skill | InlineSkill] = {
            n: s for n, s in self.skills.items() if isinstance(s, InlineSkill)
        }
        for entry in catalog.entries:
            if entry.status is not Status.ENABLED or entry.name in found:
                continue
            old = self.skills.get(entry.name)
            if isinstance(old, Skill) and old.hash == entry.hash:
                found[entry.name] = old
                continue
            try:
                found[entry.name] = await catalog.get_async(entry.name)
            except SkillogError:
                continue  # changed again while being read: the next rescan sees it
        known = {n: self._info(s, file_access) for n, s in found.items()}
        before = self._known
        self.skills, self._known = found, known
        return {
            n: why.get(n, "no longer in its sources")
            for n in known.keys() | before.keys()
            if known.get(n) != before.get(n)
        }

    def _info(self, skill: Skill | InlineSkill, file_access: bool) -> SkillInfo:
        tools = tuple(t.name for t in self.inline_tools.get(skill.name, ()))
        plain = _as_skill(skill)
        return skill_info(plain, file_access, tools=tools, signed_by=self._signature(plain))

    def _signature(self, skill: Skill) -> str | None:
        """The trusted key whose signature over ``skill``'s hash verifies (None when
        no signers are trusted: nothing is read)."""
        if not self.trusted:
            self._signature_details[skill.name] = "no trusted signers configured"
            return None
        check = check_signature(skill.root, skill.name, skill.hash, self.trusted)
        self._signature_details[skill.name] = check.detail
        return check.signed_by

    async def run_script(
        self, skill: ActiveSkill, request: ScriptRequest, get_blob: GetBlob
    ) -> ScriptResult:
        try:
            root = await self._materialize(skill, get_blob)
        except WorkdirError as e:
            return ScriptResult.refusal(request.path, str(e))
        python = python_requirements(skill.properties.metadata) if skill.properties else ()
        if not python:
            return await run_script(msgspec.structs.replace(request, root=root), bwrap=self.bwrap)
        # The skill's own environment, checked like a changed skill is: by its hash.
        state = await trio.to_thread.run_sync(env_state, python)
        problem = await trio.to_thread.run_sync(check_env, state)
        if problem is not None:
            reason = (
                f"{problem}: skill {skill.name!r} needs {' '.join(python)}; install them "
                f"with skillog skills deps {skill.name} --install"
            )
            return msgspec.structs.replace(
                ScriptResult.refusal(request.path, reason), env=state.key
            )
        request = msgspec.structs.replace(request, root=root, python_env=state.path)
        result = await run_script(request, bwrap=self.bwrap)
        return msgspec.structs.replace(result, env=state.key)

    async def call_tool(self, name: str, arguments: str, context: ToolContext) -> ToolOutcome:
        return await self.tools[name].invoke(arguments, context)

    async def env_missing(self, requirements: tuple[str, ...], call_id: str) -> bool:
        state = await trio.to_thread.run_sync(env_state, requirements)
        return state.record is None or await trio.to_thread.run_sync(check_env, state) is not None

    async def install_env(self, requirements: tuple[str, ...], call_id: str) -> EnvRecord:
        return await trio.to_thread.run_sync(build_env, requirements)

    async def approve(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return None if self.approver is None else await self.approver(request)

    def approval_withdrawn(self, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        withdrawn = getattr(self.approver, "withdrawn", None)
        if withdrawn is not None:
            withdrawn(request, decision)

    async def mcp_changes(self, recorded: Mapping[str, McpStatus]) -> list[McpStatus]:
        if self.mcp is None:
            return mcp_gone(recorded, ())
        return await self.mcp.changes(recorded)

    async def call_mcp(
        self,
        server: str,
        tool: str,
        arguments: str,
        context: ToolContext,
        *,
        stored_cap: int,
        model_cap: int,
        requests: ServerRequests | None = None,
        task: McpTask | None = None,
    ) -> McpOutcome:
        if self.mcp is None:
            message = (
                f"MCP server {server!r} is not connected in this process (its servers are "
                "connected by Agent.run and Agent.resume)"
            )
            return McpOutcome(content=message, stored=b"", size=0, failure="unavailable")
        return await self.mcp.call(
            server,
            tool,
            arguments,
            context,
            stored_cap=stored_cap,
            model_cap=model_cap,
            requests=requests,
            task=task,
        )

    async def elicit(
        self, request: ElicitationRequest, *, index: int, timeout_ms: int
    ) -> ElicitationAnswer | None:
        wait = None
        if self.forms_store is not None and request.params:
            wait = FormWait(
                self.forms_store, request.session_id, request.call_id, index, request.params
            )
            stored = await wait.stored()
            if stored is not None:
                return _from_log(*stored)
        with trio.move_on_after(timeout_ms / 1000):
            if wait is None:
                return None if self.elicitor is None else await self.elicitor(request)
            if self.elicitor is None:
                return _from_log(*await wait.wait())
            return await self._first_answer(request, wait)
        timeout = ElicitationAnswer(action="cancel", decided_by="timeout")
        _withdraw(self.elicitor, request, timeout)
        return timeout

    async def _first_answer(self, request: ElicitationRequest, wait: FormWait) -> ElicitationAnswer:
        """The embedding program's elicitor (the terminal) and the log race for one
        form: the answer that holds is the first recorded in ``forms/<session>``
        (:meth:`FormWait.claim`), and the loser is told (``withdrawn``). An elicitor that
        cannot answer (None) leaves the form to the log; a ``cancel`` it chooses is an
        answer like the others: claimed, so the log says who cancelled."""
        assert self.elicitor is not None
        logged: tuple[McpFormAnswered, str] | None = None
        mine: ElicitationAnswer | None = None

        async def watch(nursery: trio.Nursery) -> None:
            nonlocal logged
            logged = await wait.wait()
            nursery.cancel_scope.cancel()  # the prompt is withdrawn

        failed: Exception | None = None  # raised bare, as without the watch beside it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery)
            try:
                mine = await self.elicitor(request)
            except Exception as e:
                failed = e
            if mine is not None or failed is not None:
                nursery.cancel_scope.cancel()
        if failed is not None and logged is None:
            raise failed
        if logged is None:
            assert mine is not None
            answer, digest, ours = await wait.claim(mine.action, mine.content, mine.decided_by)
            if ours:
                return msgspec.structs.replace(mine, answer=digest)
            logged = (answer, digest)
        taken = _from_log(*logged)
        _withdraw(self.elicitor, request, taken)
        return taken

    def mcp_progress(self, progress: McpProgress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)

    async def mcp_roots(self, roots: Mapping[str, tuple[McpRoot, ...]]) -> None:
        if self.mcp is not None:
            await self.mcp.set_roots(roots)

    async def sample(self, request: ModelRequest, *, call_id: str, index: int) -> ModelResponse:
        if self.model is None:
            raise ModelError("no model is connected in this process to answer sampling")
        return await self.model.complete(request)

    def close(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        if self._search is not None:
            self._search[1].close()
            self._search = None

    async def _materialize(self, skill: ActiveSkill, get_blob: GetBlob) -> str:
        cache = self.cache_dir
        if cache is None:
            if self._workdir is None:
                self._workdir = tempfile.mkdtemp(prefix="skillog-run-")
            cache = self._workdir
        files = {f.path: (f.executable, await get_blob(f.sha256)) for f in skill.files}
        return await trio.to_thread.run_sync(materialize, cache, skill.hash, files)


def _folder_tools(
    name: str, manifest: SkillManifest, blobs: Mapping[str, bytes]
) -> tuple[ToolDef, ...]:
    """The tools a skill folder declares in ``tools.yaml``, read from the snapshot just
    taken (what the log pins); a broken file makes the skill fail to load, saying why."""
    try:
        declared = parse_toolset(name, {e.path: blobs[e.sha256] for e in manifest.entries})
    except ToolsetError as e:
        raise SkillUnavailableError(str(e)) from e
    return tuple(
        ToolDef(
            name=t.name, description=t.description, input_schema=t.input_schema, script=t.script
        )
        for t in declared
    )


def _reload(source: Skill) -> Skill:
    assert source.root is not None
    try:
        # As leniently as it was discovered: a skill loaded with warnings was lenient.
        return load_skill(
            Path(source.root), tier=source.tier, source=source.source, strict=not source.warnings
        )
    except SkillogError as e:
        raise SkillUnavailableError(f"skill {source.name!r} can no longer be loaded: {e}") from e


def _as_skill(skill: Skill | InlineSkill) -> Skill:
    return skill.to_skill() if isinstance(skill, InlineSkill) else skill


def _host_tools(skill: InlineSkill) -> tuple[HostTool, ...]:
    return tuple(t if isinstance(t, HostTool) else HostTool.from_function(t) for t in skill.tools)  # type: ignore[arg-type]
