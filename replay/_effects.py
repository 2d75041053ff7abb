"""Effects that answer from a recording, for re-drive (like Temporal's replayer).

The re-driven session runs the current runtime code; wherever that code would touch
the world (load a skill, run a script, call a host tool, ask for an approval) these
effects hand back what the recorded session got. They never raise for a call the
recording lacks: they answer something the recording cannot contain (an unavailable
skill, a refused script, a tool error, a denial), so the events diverge and the event
comparison names the first difference.

Answers are found near the re-driven session's position (``position()``, the seq its
next event will get): a turn's effects are looked up among the recorded events from
that seq up to the next ``prompt.rendered``, so repeated loads of one skill (with
different contents) each get their own recorded activation.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping
from typing import cast

import msgspec

from eventlog import EventStore
from orchestrator import (
    ActiveSkill,
    ApprovalDecision,
    ApprovalRemembered,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ElicitationAnswer,
    ElicitationRequest,
    LoadedSkill,
    McpElicitationAnswered,
    McpElicited,
    McpOutcome,
    McpProgress,
    McpResult,
    McpRoot,
    McpSampleAnswered,
    McpSampled,
    McpServerFailed,
    McpTaskCreated,
    McpToolsListed,
    ModelError,
    ModelRequest,
    ModelResponse,
    PromptRendered,
    ScriptExecuted,
    ServerRequests,
    SessionEnded,
    SessionSuspended,
    SkillActivated,
    SkillActivationFailed,
    SkillChanged,
    SkillEnvBuilt,
    SkillUnavailableError,
    ToolCompleted,
    ToolContext,
    ToolOutcome,
    is_sampling_question,
)
from orchestrator.runtime import GetBlob, McpStatus, McpTask, RefreshContext
from orchestrator.scripts import SandboxUsed, ScriptRequest, ScriptResult
from orchestrator.skills import DependencyError, EnvRecord, SkillManifest

from ._recording import Recording
from ._skills import rebuild_skill

NO_RECORDING = "re-drive: the recording has no"


class RecordedEffects:
    """An ``orchestrator`` ``Effects`` answering from ``recording`` (blobs from
    ``store``). ``position()`` is the seq the re-driven session appends next."""

    def __init__(
        self, recording: Recording, store: EventStore, position: Callable[[], int]
    ) -> None:
        self._store = store
        self._position = position
        bodies = recording.bodies
        self._ends = [
            i for i, b in enumerate(bodies) if isinstance(b, PromptRendered | SessionEnded)
        ]
        self._loads: dict[str, list[int]] = {}
        self._scripts: list[int] = []
        self._tools: dict[str, ToolCompleted] = {}
        self._mcp_results: dict[str, McpResult] = {}
        self._mcp_tasks: dict[str, McpTaskCreated] = {}
        self._mcp_listings: list[int] = []
        # What each call's server asked while it ran, in the recorded order.
        self._asked: dict[str, list[McpSampled | McpElicited]] = {}
        self._answers: dict[tuple[str, int], McpSampleAnswered] = {}
        self._forms: dict[tuple[str, int], McpElicitationAnswered] = {}
        self._approvals: dict[str, ApprovalResolved] = {}
        self._remembered: dict[str, ApprovalRemembered] = {}
        self._suspended: set[str] = set()  # calls decided only after the session suspended
        self._installs: set[str] = set()  # calls whose approval asked to install first
        self._envs: dict[str, SkillEnvBuilt] = {}
        for seq, body in enumerate(bodies):
            match body:
                case SessionSuspended():
                    self._suspended.update(body.call_ids)
                case SkillActivated() | SkillActivationFailed():
                    self._loads.setdefault(body.name, []).append(seq)
                case ScriptExecuted():
                    self._scripts.append(seq)
                case ApprovalResolved():
                    self._approvals[body.call_id] = body
                case ApprovalRemembered():
                    self._remembered[body.call_id] = body
                case ApprovalRequested() if body.install:
                    self._installs.add(body.call_id)
                case SkillEnvBuilt() if body.call_id is not None:
                    self._envs[body.call_id] = body
                case ToolCompleted():
                    self._tools[body.call_id] = body
                case McpResult():
                    self._mcp_results[body.call_id] = body
                case McpTaskCreated():
                    self._mcp_tasks[body.call_id] = body
                case McpToolsListed() | McpServerFailed():
                    self._mcp_listings.append(seq)
                case McpSampled() | McpElicited():
                    self._asked.setdefault(body.call_id, []).append(body)
                case McpSampleAnswered():
                    self._answers[body.call_id, body.index] = body
                case McpElicitationAnswered():
                    self._forms[body.call_id, body.index] = body
                case _:
                    pass
        self._bodies = bodies
        self._used: set[int] = set()

    def _window(self) -> tuple[int, int]:
        start = self._position()
        i = bisect.bisect_left(self._ends, start)
        return start, self._ends[i] if i < len(self._ends) else len(self._bodies)

    async def load_skill(self, name: str) -> LoadedSkill:
        start, end = self._window()
        seqs = self._loads.get(name, [])
        here = [s for s in seqs if start <= s < end and s not in self._used]
        if here:
            self._used.add(here[0])
            body = self._bodies[here[0]]
            if isinstance(body, SkillActivationFailed):
                raise SkillUnavailableError(body.reason)
            assert isinstance(body, SkillActivated)
            return await self._loaded(here[0], body)
        # Loading a skill that is already active with the same contents records
        # nothing; the runtime still asks for it, and gets the pinned snapshot.
        before = [s for s in seqs if (s < start or s in self._used)]
        last = self._bodies[before[-1]] if before else None
        if isinstance(last, SkillActivated):
            return await self._loaded(before[-1], last)
        raise SkillUnavailableError(f"{NO_RECORDING} activation of {name!r} at seq {start}")

    async def _loaded(self, seq: int, event: SkillActivated) -> LoadedSkill:
        blobs = {f.sha256: await self._store.get_blob(f.sha256) for f in event.files}
        skill = await rebuild_skill(event, blobs)
        changed = self._bodies[seq - 1] if seq > 0 else None
        if isinstance(changed, SkillChanged) and changed.skill is not None:
            # The live skill came from a directory; its location is in the catalog entry
            # the runtime recorded for the change.
            skill = msgspec.structs.replace(skill, location=changed.skill.location)
        return LoadedSkill(
            skill=skill,
            manifest=SkillManifest(entries=event.files, hash=event.hash),
            blobs=tuple(blobs.values()),
            tools=event.tools,
            signed_by=event.signed_by,
        )

    async def run_script(
        self, skill: ActiveSkill, request: ScriptRequest, get_blob: GetBlob
    ) -> ScriptResult:
        start, end = self._window()
        for seq in self._scripts:
            body = self._bodies[seq]
            assert isinstance(body, ScriptExecuted)
            if (
                start <= seq < end
                and seq not in self._used
                and (body.skill, body.path, body.args) == (skill.name, request.path, request.args)
            ):
                self._used.add(seq)
                return ScriptResult(
                    path=body.path,
                    exit_code=body.exit_code,
                    stdout=(await self._store.get_blob(body.stdout_digest)).decode(),
                    stderr=(await self._store.get_blob(body.stderr_digest)).decode(),
                    duration_ms=body.duration_ms,
                    timed_out=body.timed_out,
                    truncated=body.truncated,
                    sandbox=cast(SandboxUsed, body.sandbox),
                    refused=body.refused,
                    killed=body.killed,
                    enforced=body.enforced,
                    env=body.env,
                )
        return ScriptResult.refusal(
            request.path, f"{NO_RECORDING} run of {skill.name}/{request.path} at seq {start}"
        )

    async def call_tool(self, name: str, arguments: str, context: ToolContext) -> ToolOutcome:
        done = self._tools.get(context.call_id)
        if done is None or done.tool != name:
            return ToolOutcome(
                content=f"{NO_RECORDING} result of {name} call {context.call_id!r}",
                is_error=True,
                error_type="redrive",
            )
        return ToolOutcome(content=done.content, is_error=done.is_error, error_type=done.error_type)

    async def env_missing(self, requirements: tuple[str, ...], call_id: str) -> bool:
        """As the recorded approval request of the call said: nothing is looked at."""
        return call_id in self._installs

    async def install_env(self, requirements: tuple[str, ...], call_id: str) -> EnvRecord:
        """The environment the recorded call built: nothing is installed."""
        built = self._envs.get(call_id)
        if built is None:
            raise DependencyError(f"{NO_RECORDING} environment built by call {call_id!r}")
        return built.record()

    async def search_skills(
        self, query: str, limit: int, among: Collection[str], call_id: str
    ) -> str:
        """The recorded result of this ``skills.search`` call: nothing is searched."""
        done = self._tools.get(call_id)
        if done is None or done.tool != "skills.search" or done.is_error:
            return f"{NO_RECORDING} result of skills.search call {call_id!r}"
        return done.content

    async def refresh(self, context: Callable[[], RefreshContext]) -> tuple[SkillChanged, ...]:
        """The catalog changes the recorded session made between turns at this point
        (a rescan or an enabled predicate): the recorded decisions, handed back."""
        start = self._position()
        out: list[SkillChanged] = []
        for body in self._bodies[start:]:
            if not isinstance(body, SkillChanged) or body.cause is None:
                break
            out.append(body)
        return tuple(out)

    async def mcp_changes(self, recorded: Mapping[str, McpStatus]) -> list[McpStatus]:
        """The listings and failures the recording has before its next prompt: no MCP
        server is ever contacted."""
        start, end = self._window()
        out: list[McpStatus] = []
        for seq in self._mcp_listings:
            body = self._bodies[seq]
            if start <= seq < end and isinstance(body, McpToolsListed | McpServerFailed):
                out.append(body)
        return out

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
        if requests is not None:
            # What the server asked during the call, asked again in the recorded
            # order: the runtime's code decides and records as it did.
            for asked in self._asked.get(context.call_id, ()):
                params = await self._store.get_blob(asked.params)
                if isinstance(asked, McpSampled):
                    await requests.sample(params)
                elif not is_sampling_question(params):  # skillog's own: asked by sample
                    await requests.elicit(params)
        created = self._mcp_tasks.get(context.call_id)
        if task is not None and task.task_id is None and created is not None:
            await task.created(created.task_id, created.ttl_ms)  # as the server named it
        result = self._mcp_results.get(context.call_id)
        done = self._tools.get(context.call_id)
        if result is None or done is None or (result.server, result.tool) != (server, tool):
            message = f"{NO_RECORDING} result of MCP tool {server}/{tool} call {context.call_id!r}"
            return McpOutcome(content=message, stored=b"", size=0, failure="unavailable")
        return McpOutcome(
            content=done.content,
            stored=await self._store.get_blob(result.digest),
            size=result.size,
            is_error=result.is_error,
            truncated=result.truncated,
            duration_ms=result.duration_ms,
            failure=result.failure,
            notes=await self._store.get_blob(result.notes) if result.notes else b"",
        )

    async def elicit(
        self, request: ElicitationRequest, *, index: int, timeout_ms: int
    ) -> ElicitationAnswer | None:
        answered = self._forms.get((request.call_id, index))
        if answered is None or answered.decided_by == "nobody":
            return None
        return ElicitationAnswer(
            action=answered.action,
            decided_by=answered.decided_by,
            content=answered.content,
            answer=answered.answer,
        )

    def mcp_progress(self, progress: McpProgress) -> None:
        pass  # nothing runs live in a re-drive

    async def mcp_roots(self, roots: Mapping[str, tuple[McpRoot, ...]]) -> None:
        pass  # no server to tell: the roots are in the recording

    async def sample(self, request: ModelRequest, *, call_id: str, index: int) -> ModelResponse:
        answered = self._answers.get((call_id, index))
        if answered is None:
            raise ModelError(f"{NO_RECORDING} answer to sampling request {index} of {call_id!r}")
        if answered.response is None:
            raise ModelError(answered.error or "the model failed")
        return answered.response

    def approval_withdrawn(self, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        pass  # nobody is asked in a re-drive

    async def approve(self, request: ApprovalRequest) -> ApprovalDecision | None:
        if request.call_id in self._suspended:
            return None  # nobody answered in the recorded process either
        resolved = self._approvals.get(request.call_id)
        if resolved is None:
            return ApprovalDecision(
                approved=False, decided_by=f"{NO_RECORDING} decision for {request.call_id!r}"
            )
        grant = self._remembered.get(request.call_id)
        remember = None
        if grant is not None:
            remember = "skill" if grant.scope == "skill" else f"pattern:{grant.pattern}"
        return ApprovalDecision(
            approved=resolved.approved,
            decided_by=resolved.decided_by,
            reason=resolved.reason,
            remember=remember,
        )
