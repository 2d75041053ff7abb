"""The LLM-callable runtime tools (seed 002) and the gate every tool call passes.

Each call is handled against a :class:`View` of the session state and produces the
events and blobs to record, ending in one ``tool.completed`` whose content is what the
model reads. Errors of any kind (bad arguments, unknown skills, refused paths, policy
denials, failing scripts) become readable tool results and events; they never escape
to the loop.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import msgspec

from eventlog import NewEvent, SkillogError

from ._effects import ApprovalRequest, Effects, GetBlob, LoadedSkill
from ._events import (
    CODEC,
    ActivationTrigger,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    PolicyDenied,
    ResourceRead,
    ScriptExecuted,
    SessionStarted,
    SkillActivated,
    SkillActivationFailed,
    SkillChanged,
    SkillDeactivated,
    SkillInfo,
    ToolCalled,
    ToolCompleted,
)
from ._host_tools import ToolContext
from ._model import ToolCall, encode_canonical
from ._paths import PathRefusedError, check_relative_path
from ._policy import (
    allowlist,
    host_tool_needs_approval,
    offered,
    permits,
    restricting_skills,
    script_gate,
)
from ._scripts import SANDBOX_UNAVAILABLE, ScriptRequest
from ._state import ActiveSkill, ActiveSkills, SessionState, active_from

MAX_ARGUMENT_BYTES = 64 * 1024
SKILL_TOOLS = ("skills.load", "skills.unload", "skills.read", "skills.run_script")
FILE_READ_TOOLS = frozenset({"Read", "read_file", "read"})
"""Host tools whose reading a listed SKILL.md counts as activating that skill."""


class ToolError(SkillogError):
    """A tool call failed in a way the model should read and act on."""

    def __init__(self, message: str, *, error_type: str = "tool_error") -> None:
        super().__init__(message)
        self.error_type = error_type


class LoadArgs(msgspec.Struct, forbid_unknown_fields=True):
    names: list[str]
    mode: Literal["replace", "add"] = "replace"


class UnloadArgs(msgspec.Struct, forbid_unknown_fields=True):
    names: list[str] = []
    all: bool = False


class ReadArgs(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    skill: str | None = None


class RunArgs(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    skill: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    workdir: str = "."


@dataclass
class View(ActiveSkills):
    """What a tool call decides from: the session's configuration, catalog and active
    skills as they stand at the call's position in the turn. Calls that change them
    (load, unload) run in order; every other call gets its own copy, so concurrent
    calls cannot see each other and the recorded events do not depend on timing."""

    config: SessionStarted
    catalog: dict[str, SkillInfo]
    active: list[ActiveSkill]

    @classmethod
    def of(cls, state: SessionState) -> View:
        assert state.config is not None
        return cls(state.config, dict(state.catalog), list(state.active))

    def copy(self) -> View:
        return View(self.config, dict(self.catalog), list(self.active))


@dataclass
class Recorder:
    """Collects the events (with their bodies) and blobs one call produces, stamped with
    the clock as they happen."""

    clock: Callable[[], int]
    bodies: list[Event] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def add(self, body: Event) -> None:
        self.bodies.append(body)
        self.events.append(CODEC.encode(body, recorded_at=self.clock()))

    def blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest


@dataclass
class CallContext:
    session_id: str
    turn: int
    call: ToolCall
    view: View
    rec: Recorder
    effects: Effects
    get_blob: GetBlob


async def handle_call(ctx: CallContext) -> None:
    """Run one tool call to completion, recording everything; never raises for the
    call's own failures."""
    call, view = ctx.call, ctx.view
    ctx.rec.add(
        ToolCalled(
            turn=ctx.turn,
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            skills=view.active_names,
        )
    )
    start = time.monotonic_ns()
    try:
        content = await _dispatch(ctx)
        is_error, error_type = False, None
    except ToolError as e:
        content, is_error, error_type = str(e), True, e.error_type
    ctx.rec.add(
        ToolCompleted(
            call_id=call.id,
            tool=call.name,
            is_error=is_error,
            content=content,
            duration_ms=(time.monotonic_ns() - start) // 1_000_000,
            error_type=error_type,
        )
    )


async def _dispatch(ctx: CallContext) -> str:
    name = ctx.call.name
    available = offered_tools(ctx.view)
    if name not in available:
        if name in all_tools(ctx.view):
            raise _deny(ctx, "allowed-tools", _allowlist_reason(ctx.view, name))
        raise ToolError(
            f"there is no tool named {name!r}; available tools: "
            f"{', '.join(sorted(available)) or 'none'}",
            error_type="unknown_tool",
        )
    if name == "skills.load":
        return await load(ctx, _args(ctx, LoadArgs))
    if name == "skills.unload":
        return unload(ctx, _args(ctx, UnloadArgs))
    if name == "skills.read":
        return await read(ctx, _args(ctx, ReadArgs))
    if name == "skills.run_script":
        return await run(ctx, _args(ctx, RunArgs))
    return await host_tool(ctx)


def all_tools(view: View) -> set[str]:
    """Every tool the session knows, whether or not the allowlist offers it."""
    names = {t.name for t in view.config.host_tools}
    names.update(t.name for s in view.active for t in s.tools)
    if view.catalog:
        names.update(SKILL_TOOLS)
    return names


def offered_tools(view: View) -> set[str]:
    rules = allowlist(view.active)
    return {n for n in all_tools(view) if offered(rules, n)}


A = TypeVar("A", bound=msgspec.Struct)


def _args(ctx: CallContext, kind: type[A]) -> A:
    raw = ctx.call.arguments
    size = len(raw.encode())
    if size > MAX_ARGUMENT_BYTES:
        raise ToolError(
            f"arguments of {ctx.call.name} are {size} bytes; the limit is {MAX_ARGUMENT_BYTES}",
            error_type="invalid_arguments",
        )
    try:
        return msgspec.json.decode(raw or "{}", type=kind)
    except msgspec.DecodeError as e:
        raise ToolError(
            f"invalid arguments for {ctx.call.name}: {e}", error_type="invalid_arguments"
        ) from None


# -- skills.load / skills.unload ------------------------------------------------------


async def load(ctx: CallContext, args: LoadArgs) -> str:
    view = ctx.view
    names = list(dict.fromkeys(args.names))
    if not names:
        raise ToolError("skills.load needs at least one name", error_type="invalid_arguments")
    unknown = [n for n in names if n not in view.catalog]
    if unknown:
        raise ToolError(
            f"unknown skill {', '.join(map(repr, unknown))}; available: {_listing(view.catalog)}",
            error_type="unknown_skill",
        )
    kept = [] if args.mode == "replace" else [s.name for s in view.active if s.name not in names]
    cap = view.config.max_active_skills
    if len(kept) + len(names) > cap:
        raise ToolError(
            f"at most {cap} skills can be active at once; this load would make "
            f"{len(kept) + len(names)}. Load fewer, or use mode 'replace'.",
            error_type="too_many_skills",
        )
    if args.mode == "replace":
        for skill in list(view.active):
            if skill.name not in names:
                _deactivate(ctx, skill, "replace")
    await activate(ctx, names, mode=args.mode, trigger="tool")
    return encode_canonical(_receipt(view)).decode()


async def activate(
    ctx: CallContext,
    names: list[str],
    *,
    mode: Literal["replace", "add"],
    trigger: ActivationTrigger,
) -> None:
    """Load ``names`` from their source and record the activations; a name that fails
    records ``skill.activation_failed`` and raises a ToolError after the others."""
    view = ctx.view
    failed: list[str] = []
    for name in names:
        try:
            loaded = await ctx.effects.load_skill(name)
        except SkillogError as e:
            ctx.rec.add(SkillActivationFailed(name=name, reason=str(e), call_id=ctx.call.id))
            failed.append(f"{name}: {e}")
            continue
        current = view.active_skill(name)
        if current is not None and current.hash == loaded.skill.hash and mode == "add":
            continue  # already in context with these exact contents
        _record_activation(ctx, loaded, mode=mode, trigger=trigger)
    if failed:
        raise ToolError("could not load " + "; ".join(failed), error_type="activation_failed")


def _record_activation(
    ctx: CallContext,
    loaded: LoadedSkill,
    *,
    mode: Literal["replace", "add"],
    trigger: ActivationTrigger,
) -> None:
    view = ctx.view
    skill = loaded.skill
    recorded = view.catalog.get(skill.name)
    info = loaded.info(view.config.file_access)
    if recorded is not None and recorded.hash != skill.hash:
        ctx.rec.add(
            SkillChanged(name=skill.name, old_hash=recorded.hash, new_hash=skill.hash, skill=info)
        )
        view.catalog[skill.name] = info
    for data in loaded.blobs:
        ctx.rec.blob(data)
    event = SkillActivated(
        name=skill.name,
        hash=skill.hash,
        tier=str(skill.tier),
        source=skill.source,
        mode=mode,
        trigger=trigger,
        body_digest=ctx.rec.blob(skill.body.encode()),
        files=loaded.manifest.entries,
        allowed_tools=skill.properties.allowed_tools,
        tools=loaded.tools,
        call_id=ctx.call.id if trigger == "tool" else None,
    )
    ctx.rec.add(event)
    view.active = [s for s in view.active if s.name != skill.name] + [active_from(event)]


def _deactivate(ctx: CallContext, skill: ActiveSkill, reason: Literal["unload", "replace"]) -> None:
    ctx.rec.add(
        SkillDeactivated(name=skill.name, hash=skill.hash, reason=reason, call_id=ctx.call.id)
    )
    ctx.view.active = [s for s in ctx.view.active if s.name != skill.name]


def unload(ctx: CallContext, args: UnloadArgs) -> str:
    view = ctx.view
    if not args.all and not args.names:
        raise ToolError("skills.unload needs names or all=true", error_type="invalid_arguments")
    targets = view.active_names if args.all else tuple(dict.fromkeys(args.names))
    missing = [n for n in targets if view.active_skill(n) is None]
    for name in targets:
        skill = view.active_skill(name)
        if skill is not None:
            _deactivate(ctx, skill, "unload")
    receipt = _receipt(view)
    if missing:
        receipt["not_active"] = missing
    return encode_canonical(receipt).decode()


def _receipt(view: View) -> dict[str, object]:
    """The seed-002 receipt: the active set with digests and properties."""
    items = []
    for skill in view.active:
        info = view.catalog.get(skill.name)
        item: dict[str, object] = {
            "name": skill.name,
            "digest": f"sha256:{skill.hash}",
            "properties": {"name": skill.name, "description": info.description if info else ""},
        }
        if skill.allowed_tools is not None:
            item["properties"]["allowed-tools"] = skill.allowed_tools  # type: ignore[index]
        if view.config.file_access and info is not None and info.location:
            item["location"] = info.location
            item["root_dir"] = info.location.rsplit("/", 1)[0]
        items.append(item)
    return {"active_skills": items}


# -- skills.read ----------------------------------------------------------------------


async def read(ctx: CallContext, args: ReadArgs) -> str:
    """Read from the snapshot the skill was loaded with: what the model reads is what
    the log holds under the skill's pinned hash, even if the folder changed since."""
    skill = _target_skill(ctx, args.skill)
    rel = _safe_path(args.path)
    if rel.count("/") > 1 and not ctx.view.config.policy.nested_paths:
        raise ToolError(
            f"{rel} is nested more than one level deep; this session's policy only reads "
            "files like references/guide.md (PolicyConfig.nested_paths enables deeper ones)",
            error_type="path_refused",
        )
    if not permits(allowlist(ctx.view.active), "skills.read", path=rel):
        raise _deny(ctx, "allowed-tools", _allowlist_reason(ctx.view, "skills.read", rel), skill)
    entry = skill.file(rel)
    if entry is None:
        raise ToolError(
            f"skill {skill.name!r} has no file {rel!r}; its files: "
            f"{', '.join(f.path for f in skill.files[:30])}",
            error_type="not_found",
        )
    limit = ctx.view.config.policy.read_max_bytes
    data = await ctx.get_blob(entry.sha256)
    if len(data) > limit:
        raise ToolError(
            f"{rel} is {len(data)} bytes; skills.read returns at most {limit}",
            error_type="too_large",
        )
    ctx.rec.add(
        ResourceRead(
            call_id=ctx.call.id, skill=skill.name, path=rel, size=len(data), digest=entry.sha256
        )
    )
    try:
        text = data.decode("utf-8")
        if "\x00" not in text:
            return text
    except UnicodeDecodeError:
        pass
    return encode_canonical(
        {"path": rel, "encoding": "base64", "data": base64.b64encode(data).decode()}
    ).decode()


# -- skills.run_script ----------------------------------------------------------------


async def run(ctx: CallContext, args: RunArgs) -> str:
    view = ctx.view
    skill = _target_skill(ctx, args.skill)
    rel = _safe_path(args.path)
    if not permits(allowlist(view.active), "skills.run_script", path=rel, args=args.args):
        raise _deny(ctx, "allowed-tools", _allowlist_reason(view, "skills.run_script", rel), skill)
    if skill.file(rel) is None:
        raise ToolError(f"skill {skill.name!r} has no script {rel!r}", error_type="not_found")
    policy = view.config.policy
    gate = script_gate(policy, skill.tier)
    if gate.needs_approval:
        await _approve(ctx, f"run {rel} {' '.join(args.args)}".strip(), skill)
    request = ScriptRequest(
        root="",
        path=rel,
        args=tuple(args.args),
        env=dict(args.env),
        workdir=args.workdir,
        timeout_ms=policy.script_timeout_ms,
        max_output_bytes=policy.output_cap_bytes,
        sandbox=gate.sandbox,
        network=gate.network,
    )
    result = await ctx.effects.run_script(skill, request, ctx.get_blob)
    ctx.rec.add(
        ScriptExecuted(
            call_id=ctx.call.id,
            skill=skill.name,
            path=rel,
            args=tuple(args.args),
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            stdout_digest=ctx.rec.blob(result.stdout.encode()),
            stderr_digest=ctx.rec.blob(result.stderr.encode()),
            sandbox=result.sandbox,
            network=gate.network,
            timed_out=result.timed_out,
            truncated=result.truncated,
            refused=result.refused,
        )
    )
    if result.refused is not None:
        rule = "sandbox" if result.refused.startswith(SANDBOX_UNAVAILABLE) else "script"
        raise _deny(ctx, rule, result.refused, skill)
    return encode_canonical(
        {
            "path": rel,
            "exit_code": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "duration_ms": result.duration_ms,
            "timed_out": result.timed_out,
            "truncated": result.truncated,
        }
    ).decode()


# -- host tools -----------------------------------------------------------------------


async def host_tool(ctx: CallContext) -> str:
    view = ctx.view
    name = ctx.call.name
    # No allowlist check here: _dispatch only lets offered tools through, and a host
    # tool is offered exactly when the allowlist permits it (no patterns apply).
    if host_tool_needs_approval(view.config.policy, name):
        await _approve(ctx, f"call {name} with {ctx.call.arguments}", None)
    context = ToolContext(
        session_id=ctx.session_id, call_id=ctx.call.id, active_skills=view.active_names
    )
    outcome = await ctx.effects.call_tool(name, ctx.call.arguments, context)
    if outcome.is_error:
        raise ToolError(outcome.content, error_type=outcome.error_type or "tool_error")
    if name in FILE_READ_TOOLS:
        await _file_read_activation(ctx)
    return outcome.content


async def _file_read_activation(ctx: CallContext) -> None:
    """A host tool read a listed SKILL.md (file-based agents, seed 001): that is an
    activation, recorded like one (trigger ``file-read``)."""
    try:
        args = msgspec.json.decode(ctx.call.arguments)
    except msgspec.DecodeError:
        return
    if not isinstance(args, dict):
        return
    paths = {args.get(key) for key in ("path", "file_path")}
    view = ctx.view
    for skill in view.catalog.values():
        if skill.location is not None and skill.location in paths:
            if view.active_skill(skill.name) is None:
                if len(view.active) >= view.config.max_active_skills:
                    ctx.rec.add(
                        SkillActivationFailed(
                            name=skill.name,
                            reason=f"{view.config.max_active_skills} skills are already active",
                            call_id=ctx.call.id,
                        )
                    )
                    return
                with contextlib.suppress(ToolError):  # recorded as activation_failed
                    await activate(ctx, [skill.name], mode="add", trigger="file-read")
            return


# -- shared gates ---------------------------------------------------------------------


async def _approve(ctx: CallContext, action: str, skill: ActiveSkill | None) -> None:
    ctx.rec.add(
        ApprovalRequested(
            call_id=ctx.call.id,
            tool=ctx.call.name,
            action=action,
            skill=skill.name if skill else None,
            tier=skill.tier if skill else None,
        )
    )
    decision = await ctx.effects.approve(
        ApprovalRequest(
            session_id=ctx.session_id,
            call_id=ctx.call.id,
            tool=ctx.call.name,
            action=action,
            skill=skill.name if skill else None,
            tier=skill.tier if skill else None,
        )
    )
    ctx.rec.add(
        ApprovalResolved(
            call_id=ctx.call.id, approved=decision.approved, decided_by=decision.decided_by
        )
    )
    if not decision.approved:
        raise _deny(ctx, "approval", f"not approved ({decision.decided_by}): {action}", skill)


def _deny(ctx: CallContext, rule: str, reason: str, skill: ActiveSkill | None = None) -> ToolError:
    ctx.rec.add(
        PolicyDenied(
            call_id=ctx.call.id,
            tool=ctx.call.name,
            rule=rule,
            reason=reason,
            skill=skill.name if skill else None,
        )
    )
    return ToolError(f"denied by policy ({rule}): {reason}", error_type="policy_denied")


def _allowlist_reason(view: View, tool: str, path: str = "") -> str:
    target = f"{tool} {path}".strip()
    return (
        f"{target} is not in the allowed-tools of the active skill(s) "
        f"{restricting_skills(allowlist(view.active))}; unload them to use other tools"
    )


def _target_skill(ctx: CallContext, name: str | None) -> ActiveSkill:
    view = ctx.view
    if not view.active:
        raise ToolError(
            f"{ctx.call.name} needs a loaded skill; load one with skills.load first",
            error_type="no_active_skill",
        )
    skill = view.active_skill(name)
    if skill is None:
        raise ToolError(
            f"skill {name!r} is not loaded; loaded: {', '.join(view.active_names)}",
            error_type="skill_not_loaded",
        )
    return skill


def _safe_path(path: str) -> str:
    try:
        return "/".join(check_relative_path(path))
    except PathRefusedError as e:
        raise ToolError(str(e), error_type="path_refused") from None


def _listing(catalog: Mapping[str, object], limit: int = 40) -> str:
    names = list(catalog)
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
