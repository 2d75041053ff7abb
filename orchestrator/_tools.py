"""The runtime tools (seed 002) and host tools, each as a plan and an effect.

:func:`plan_call` resolves a call and decides on it from the call's view alone (which
tool, are the arguments valid, does policy allow it, must someone approve it, what is
its effect class); the plan's ``act`` is the effect, run by the pipeline (``_pipeline``)
only once its intent is durable. Errors of any kind (bad arguments, unknown skills,
refused paths, policy denials, failing scripts) become readable tool results and
events; they never escape to the loop.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

import msgspec

from eventlog import SkillogError

from ._calls import CallContext, ToolError, View, idempotency_key
from ._effects import LoadedSkill
from ._events import (
    ActivationTrigger,
    EffectClass,
    McpToolDef,
    PolicyDenied,
    ResourceRead,
    ScriptExecuted,
    ScriptStarted,
    SkillActivated,
    SkillActivationFailed,
    SkillChanged,
    SkillDeactivated,
    SkillEnvBuilt,
    SkillInfo,
    ToolDef,
)
from ._host_tools import ToolContext
from ._images import file_image_type, record_images
from ._mcp_calls import call_mcp_tool, check_arguments
from ._model import encode_canonical
from ._output import model_view
from ._policy import (
    Decision,
    SkillSettings,
    allowlist,
    allowlist_reason,
    decide,
    offered,
    settings_of,
)
from ._receipt import receipt
from ._state import ActiveSkill, ViewChange
from .scripts import SANDBOX_UNAVAILABLE, PathRefusedError, ScriptRequest, check_relative_path
from .skills import argument_problem, file_trigger, message_trigger, python_requirements

MAX_ARGUMENT_BYTES = 64 * 1024
SKILL_TOOLS = ("skills.load", "skills.unload", "skills.read", "skills.run_script")
SEARCH_TOOLS = ("skills.search", "skills.list")
"""Offered when the session has a catalog mode (``SessionStarted.catalog_mode``)."""
MAX_SEARCH_RESULTS = 20
FILE_READ_TOOLS = frozenset({"Read", "read_file", "read"})
"""Host tools whose reading a listed SKILL.md counts as activating that skill."""


class PolicyError(ToolError):
    """A call refused by policy; ``event`` (``policy.denied``) is recorded with its
    outcome."""

    def __init__(self, event: PolicyDenied) -> None:
        super().__init__(
            f"denied by policy ({event.rule}): {event.reason}", error_type="policy_denied"
        )
        self.event = event


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


class SearchArgs(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    limit: int = 5


class ListArgs(msgspec.Struct, forbid_unknown_fields=True):
    pass


Act = Callable[[CallContext], Awaitable[str]]


@dataclass(frozen=True)
class Approval:
    """What an approver is asked to allow (a script's ``path`` and ``args``);
    ``preapproved_by`` names what already allows it: a trusted skill's
    ``allowed-tools``, a policy ``allow`` rule or a remembered grant (recorded as the
    decider, nobody asked)."""

    action: str
    skill: ActiveSkill | None
    preapproved_by: str | None = None
    path: str | None = None
    args: tuple[str, ...] = ()
    denied_by: str | None = None  # a remembered denial: refused, nobody asked
    install: tuple[str, ...] = ()  # what a lazy install puts into the skill's environment


@dataclass(frozen=True)
class Plan:
    """A call resolved and decided, before anything of it runs: its effect class, and
    either the refusal the model reads or the effect to run (``act``), behind an
    approval when policy asks for one. ``script`` is the ``script.started`` intent a
    script run commits before its process starts."""

    effect: EffectClass
    act: Act | None = None
    refusal: ToolError | None = None
    approval: Approval | None = None
    script: ScriptStarted | None = None
    install: tuple[str, ...] = ()
    """A script's ``python:`` requirements when ``policy.lazy_install`` may install
    them first (the pipeline asks whether their environment is missing)."""


def plan_call(ctx: CallContext) -> Plan:
    """Resolve the tool and decide on the call from the view alone (pure: the same log
    gives the same plan in any process)."""
    name = ctx.call.name
    try:
        if not _known(ctx.view, name):
            raise ToolError(
                f"there is no tool named {name!r}; available tools: "
                f"{', '.join(sorted(offered_tools(ctx.view))) or 'none'}",
                error_type="unknown_tool",
            )
        if not offered(allowlist(ctx.view.active), name):
            raise _deny(ctx, "allowed-tools", _allowlist_reason(ctx.view, name))
        if name == "skills.load":
            return Plan("pure", functools.partial(load, _args(ctx, LoadArgs)))
        if name == "skills.unload":
            return Plan("pure", functools.partial(unload, _args(ctx, UnloadArgs)))
        if name == "skills.read":
            return _plan_read(ctx, _args(ctx, ReadArgs))
        if name == "skills.run_script":
            return _plan_run(ctx, _args(ctx, RunArgs))
        if name == "skills.search":
            return Plan("pure", functools.partial(search, _args(ctx, SearchArgs)))
        if name == "skills.list":
            _args(ctx, ListArgs)
            return Plan("pure", list_skills)
        if name in ctx.view.mcp:
            return _plan_mcp_tool(ctx, ctx.view.mcp[name])
        definition = host_tool_def(ctx.view, name)
        if definition is not None and definition.script is not None:
            return _plan_script_tool(ctx, definition)
        return _plan_host_tool(ctx)
    except ToolError as e:
        return Plan(_listed_effect(ctx.view, name), refusal=e)


REFUSED_CLASS_SINCE = (0, 1, 1)
"""The runtime version (``session.started.version``) from which a refused host tool
call records the tool's class; sessions recorded before it recorded ``pure`` and are
re-driven as they were."""


def _listed_effect(view: View, name: str) -> EffectClass:
    """The effect class a refused call records (docs/effects.md: the class is recorded
    on every call): an MCP tool's from its server's listing, a host tool's from its
    definition, ``pure`` for a name the session has no tool of (nothing runs)."""
    if name in view.mcp:
        return view.mcp[name].effect
    definition = host_tool_def(view, name)
    if definition is None or _version(view.config.version) < REFUSED_CLASS_SINCE:
        return "pure"
    return definition.effect


def _version(text: str) -> tuple[int, ...]:
    """``"0.1.1"`` as ``(0, 1, 1)``; ``()`` for a session that recorded none."""
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def all_tools(view: View) -> set[str]:
    """Every tool the session knows, whether or not the allowlist offers it."""
    names = {t.name for t in view.config.host_tools}
    names.update(t.name for s in view.active for t in s.tools)
    names.update(view.mcp)
    if view.catalog or view.active:
        names.update(SKILL_TOOLS)
        if view.config.catalog_mode:
            names.update(SEARCH_TOOLS)
    return names


def _known(view: View, name: str) -> bool:
    """``name in all_tools(view)``, without building the set for a runtime tool."""
    if name in SKILL_TOOLS and (view.catalog or view.active):
        return True
    return name in all_tools(view)


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


# -- skills.search / skills.list ------------------------------------------------------


async def search(args: SearchArgs, ctx: CallContext) -> str:
    """Ranked matches among the skills the session can see now; the result is the
    record (replay reads it from the log; re-drive gets the recorded one back)."""
    if not args.query.strip():
        raise ToolError(
            "query is empty; say what the skill should do", error_type="invalid_arguments"
        )
    if not 1 <= args.limit <= MAX_SEARCH_RESULTS:
        raise ToolError(
            f"limit must be 1 to {MAX_SEARCH_RESULTS}, not {args.limit}",
            error_type="invalid_arguments",
        )
    return await ctx.effects.search_skills(
        args.query, args.limit, frozenset(ctx.view.catalog), ctx.call.id
    )


async def list_skills(ctx: CallContext) -> str:
    """The visible catalog as data (a pure function of the view)."""
    rows = [
        {"name": s.name, "description": s.description, "version": s.version, "tier": s.tier}
        for s in ctx.view.catalog.values()
    ]
    return msgspec.json.encode({"skills": rows}).decode()


# -- skills.load / skills.unload ------------------------------------------------------


async def load(args: LoadArgs, ctx: CallContext) -> str:
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
    receipt = _receipt(view, names, await _sizes(ctx, names))
    if view.config.instructions_in_results or view.config.instructions_mode == "results":
        receipt["instructions"] = {
            b.name: ctx.rec.blobs[b.body_digest].decode()
            for b in ctx.rec.bodies
            if isinstance(b, SkillActivated)
        }
    return encode_canonical(receipt).decode()


async def activate(
    ctx: CallContext,
    names: list[str],
    *,
    mode: Literal["replace", "add"],
    trigger: ActivationTrigger,
    fired: Mapping[str, str] | None = None,
) -> None:
    """Load ``names`` from their source and record the activations (``fired``: the
    declared trigger that fired for each, for trigger ``triggered``); a name that fails
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
        unsigned = _unsigned(view, loaded)
        if unsigned is not None:
            ctx.rec.add(SkillActivationFailed(name=name, reason=unsigned, call_id=ctx.call.id))
            failed.append(f"{name}: {unsigned}")
            continue
        current = view.active_skill(name)
        if current is not None and current.hash == loaded.skill.hash and mode == "add":
            continue  # already in context with these exact contents
        why = (fired or {}).get(name)
        _record_activation(ctx, loaded, mode=mode, trigger=trigger, fired=why)
    if failed:
        raise ToolError("could not load " + "; ".join(failed), error_type="activation_failed")


def _unsigned(view: View, loaded: LoadedSkill) -> str | None:
    """Why policy refuses ``loaded`` for want of a signature, or None."""
    tier = str(loaded.skill.tier)
    if tier not in view.config.policy.require_signatures or loaded.signed_by is not None:
        return None
    return (
        f"policy requires a valid signature for tier {tier}, and no trusted signer signed "
        f"these contents (sha256:{loaded.skill.hash[:12]}); `skillog skills sign` signs a skill"
    )


def _record_activation(
    ctx: CallContext,
    loaded: LoadedSkill,
    *,
    mode: Literal["replace", "add"],
    trigger: ActivationTrigger,
    fired: str | None = None,
) -> None:
    view = ctx.view
    skill = loaded.skill
    recorded = view.catalog.get(skill.name)
    info = loaded.info(view.config.file_access)
    if recorded is not None and recorded.hash != skill.hash:
        _record_change(
            ctx,
            SkillChanged(
                name=skill.name,
                old_hash=recorded.hash,
                new_hash=skill.hash,
                skill=info,
                call_id=ctx.call.id or None,
            ),
        )
    for data in loaded.blobs:
        ctx.rec.blob(data)
    activated = SkillActivated(
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
        call_id=(ctx.call.id or None) if trigger in ("tool", "triggered") else None,
        version=skill.properties.metadata.get("version"),
        properties=skill.properties,
        signed_by=loaded.signed_by,
        fired=fired,
    )
    _record_change(ctx, activated)


def _deactivate(ctx: CallContext, skill: ActiveSkill, reason: Literal["unload", "replace"]) -> None:
    _record_change(
        ctx, SkillDeactivated(name=skill.name, hash=skill.hash, reason=reason, call_id=ctx.call.id)
    )


def _record_change(ctx: CallContext, event: ViewChange) -> None:
    """Stage a change of the skills and apply it to the call's view, which the calls
    after it in the turn decide from."""
    ctx.rec.add(event)
    ctx.view.change_skills(event)


async def unload(args: UnloadArgs, ctx: CallContext) -> str:
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


def _receipt(
    view: View, list_files: Collection[str] = (), sizes: dict[str, int] | None = None
) -> dict[str, object]:
    return receipt(
        view.active,
        view.catalog,
        file_access=view.config.file_access,
        nested=view.config.policy.nested_paths,
        list_files=list_files,
        sizes=sizes,
        mcp_tools=view.mcp,
    )


async def _sizes(ctx: CallContext, names: Collection[str]) -> dict[str, int]:
    """The size of every file of the named active skills (from the blobs this call
    staged, else the store): the listing in the receipt."""
    sizes: dict[str, int] = {}
    for skill in ctx.view.active:
        if skill.name in names:
            for f in skill.files:
                data = ctx.rec.blobs.get(f.sha256)
                sizes[f.sha256] = len(data if data is not None else await ctx.get_blob(f.sha256))
    return sizes


# -- skills.read ----------------------------------------------------------------------


def _plan_read(ctx: CallContext, args: ReadArgs) -> Plan:
    skill = _target_skill(ctx, args.skill)
    rel = _safe_path(args.path)
    decision = _decide(ctx, ctx.call.name, skill=skill, path=rel)
    if rel.count("/") > 1 and not _settings(decision).nested_paths:
        raise ToolError(
            f"{rel} is nested more than one level deep; this session's policy only reads "
            "files like references/guide.md (PolicyConfig.nested_paths enables deeper ones)",
            error_type="path_refused",
        )
    if decision.verdict == "denied":
        raise _refused(ctx, decision, skill)
    return Plan("pure", functools.partial(read, skill, rel))


async def read(skill: ActiveSkill, rel: str, ctx: CallContext) -> str:
    """Read from the snapshot the skill was loaded with: what the model reads is what
    the log holds under the skill's pinned hash, even if the folder changed since."""
    entry = skill.file(rel)
    if entry is None:
        raise ToolError(
            f"skill {skill.name!r} has no file {rel!r}; its files: "
            f"{', '.join(f.path for f in skill.files[:30])}",
            error_type="not_found",
        )
    limit = settings_of(ctx.view.config.policy, skill).read_max_bytes
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
    media_type = file_image_type(rel, data)
    if media_type is not None:  # shown to the model as the image it is, too
        record_images(ctx, [(media_type, data)])
    return encode_canonical(
        {"path": rel, "encoding": "base64", "data": base64.b64encode(data).decode()}
    ).decode()


# -- skills.run_script ----------------------------------------------------------------


def _plan_run(ctx: CallContext, args: RunArgs) -> Plan:
    skill = _target_skill(ctx, args.skill)
    rel = _safe_path(args.path)
    # A skill folder's tool asks policy exactly what running its script would ask.
    decision = _decide(ctx, "skills.run_script", skill=skill, path=rel, args=tuple(args.args))
    if decision.verdict == "denied":
        raise _refused(ctx, decision, skill)
    if skill.file(rel) is None:
        raise ToolError(f"skill {skill.name!r} has no script {rel!r}", error_type="not_found")
    settings = _settings(decision)
    request = ScriptRequest(
        root="",
        path=rel,
        args=tuple(args.args),
        env=dict(args.env),
        workdir=args.workdir,
        timeout_ms=settings.script_timeout_ms,
        max_output_bytes=settings.script_limits.stored_output_bytes,
        sandbox=settings.sandbox,
        network=settings.network,
        limits=settings.script_limits,
    )
    started = ScriptStarted(
        call_id=ctx.call.id,
        skill=skill.name,
        path=rel,
        args=request.args,
        sandbox=settings.sandbox,
        network=settings.network,
        timeout_ms=request.timeout_ms,
    )
    # Only a script that can run nowhere but in the sandbox, without network, is known
    # to leave nothing behind outside its private copy: that one may run again.
    rerunnable = settings.sandbox == "required" and not settings.network
    action = f"run {rel} {' '.join(args.args)}".strip()
    approval = None
    if decision.verdict == "needs_approval":
        if decision.because:
            action += f" ({decision.because})"
        approval = Approval(
            action,
            skill,
            decision.preapproved_by,
            path=rel,
            args=request.args,
            denied_by=decision.denied_by,
        )
    props = skill.properties
    lazy = ctx.view.config.policy.lazy_install != "off" and props is not None
    return Plan(
        "pure" if rerunnable else "at-most-once",
        functools.partial(run, skill, request),
        approval=approval,
        script=started,
        install=python_requirements(props.metadata) if lazy and props is not None else (),
    )


def with_install(ctx: CallContext, plan: Plan) -> Plan:
    """``plan`` (a script run whose skill's environment is missing) made to install the
    environment first, behind one approval that says so: asked for a user or
    third-party skill, pre-approved like its script for a builtin or org one."""
    assert plan.act is not None and plan.script is not None
    skill = _target_skill(ctx, plan.script.skill)
    wanted = " ".join(plan.install)
    then = plan.approval.action if plan.approval else f"run {plan.script.path}"
    action = (
        f"install {wanted} into skill {skill.name}'s own environment from the package "
        f"index (network for the installer only), then {then}"
    )
    trusted = skill.tier in ("builtin", "org")
    preapproved = None
    if trusted and (plan.approval is None or plan.approval.preapproved_by is not None):
        preapproved = f"lazy_install: {skill.tier} skill"
    approval = Approval(
        action,
        skill,
        preapproved,
        path=plan.script.path,
        args=plan.script.args,
        denied_by=plan.approval.denied_by if plan.approval else None,
        install=plan.install,
    )
    act = functools.partial(_install_then, skill.name, plan.install, plan.act)
    return dataclasses.replace(plan, act=act, approval=approval)


async def _install_then(skill: str, install: tuple[str, ...], act: Act, ctx: CallContext) -> str:
    """Build the environment (its ``skill.env_built`` committed before the script
    starts), then run the script."""
    try:
        env = await ctx.effects.install_env(install, ctx.call.id)
    except SkillogError as e:
        raise ToolError(
            f"could not install {' '.join(install)}: {e}", error_type="install_failed"
        ) from None
    await ctx.commit([SkillEnvBuilt.of(skill, env, ctx.call.id)])
    return await act(ctx)


async def run(skill: ActiveSkill, request: ScriptRequest, ctx: CallContext) -> str:
    result = await ctx.effects.run_script(skill, request, ctx.get_blob)
    enforced = result.enforced
    ctx.rec.add(
        ScriptExecuted(
            call_id=ctx.call.id,
            skill=skill.name,
            path=request.path,
            args=request.args,
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            stdout_digest=ctx.rec.blob(result.stdout.encode()),
            stderr_digest=ctx.rec.blob(result.stderr.encode()),
            sandbox=result.sandbox,
            # What the script could reach, not what was asked for.
            network=request.network if enforced is None else not enforced.network_isolated,
            timed_out=result.timed_out,
            truncated=result.truncated,
            refused=result.refused,
            killed=result.killed,
            enforced=enforced,
            env=result.env,
        )
    )
    if result.refused is not None:
        rule = "sandbox" if result.refused.startswith(SANDBOX_UNAVAILABLE) else "script"
        raise _deny(ctx, rule, result.refused, skill)
    fields: dict[str, object] = {
        "path": request.path,
        "exit_code": result.exit_code,
        "duration_ms": result.duration_ms,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
    }
    if result.killed is not None:
        fields["killed"] = result.killed
    cap = settings_of(ctx.view.config.policy, skill).output_cap_bytes
    return model_view(fields, result.stdout, result.stderr, cap)


# -- tools from skill folders (tools.yaml) ----------------------------------------------


def _plan_script_tool(ctx: CallContext, tool: ToolDef) -> Plan:
    """A call of an active skill's declared tool: its arguments checked against the
    declared schema, then planned as the ``skills.run_script`` of its script with the
    arguments as one argv element of canonical JSON (sandbox, policy, approval, the
    recorded ``script.started``/``script.executed``: all the same path)."""
    assert tool.script is not None
    owner = next(s for s in ctx.view.active if tool in s.tools)
    value = check_arguments(ctx, MAX_ARGUMENT_BYTES)  # one argv element: well under 128 KiB
    problem = argument_problem(tool.input_schema, value)
    if problem is not None:
        raise ToolError(
            f"invalid arguments for {tool.name}: {problem}", error_type="invalid_arguments"
        )
    argv = [encode_canonical(value).decode()]
    return _plan_run(ctx, RunArgs(path=tool.script, skill=owner.name, args=argv))


# -- host tools -----------------------------------------------------------------------


def host_tool_def(view: View, name: str) -> ToolDef | None:
    """The recorded definition of a host tool (or an active inline skill's tool)."""
    for tool in view.config.host_tools:
        if tool.name == name:
            return tool
    return next((t for s in view.active for t in s.tools if t.name == name), None)


def _plan_host_tool(ctx: CallContext) -> Plan:
    # No allowlist check here: plan_call only lets offered tools through, and a host
    # tool is offered exactly when the allowlist permits it (no patterns apply).
    name = ctx.call.name
    definition = host_tool_def(ctx.view, name)
    decision = _decide(ctx, name, definition=definition)
    approval = _host_approval(decision, f"call {name} with {ctx.call.arguments}")
    return Plan(
        definition.effect if definition is not None else "at-most-once",
        host_tool,
        approval=approval,
    )


def _plan_mcp_tool(ctx: CallContext, tool: McpToolDef) -> Plan:
    """An offered MCP tool: its recorded effect class, and an approval when
    ``policy.approve_host_tools`` or ``policy.mcp.approve`` names the tool or its server
    (``mcp__github``), unless pre-approved or covered by a remembered grant."""
    check_arguments(ctx)
    decision = _decide(ctx, tool.name, definition=tool)
    action = f"call {tool.mcp_name} on MCP server {tool.server} with {ctx.call.arguments}"
    approval = _host_approval(decision, action)
    return Plan(tool.effect, functools.partial(call_mcp_tool, tool), approval=approval)


def _host_approval(decision: Decision, action: str) -> Approval | None:
    """The approval a host or MCP tool call needs, as policy decided it; the action says
    what it does when that is why it asks (destructive, an effect class)."""
    if decision.verdict != "needs_approval":
        return None
    if decision.because:
        action += f" ({decision.because})"
    return Approval(action, None, decision.preapproved_by, denied_by=decision.denied_by)


async def host_tool(ctx: CallContext) -> str:
    context = ToolContext(
        session_id=ctx.session_id,
        call_id=ctx.call.id,
        active_skills=ctx.view.active_names,
        idempotency_key=idempotency_key(ctx.session_id, ctx.call.id),
    )
    outcome = await ctx.effects.call_tool(ctx.call.name, ctx.call.arguments, context)
    if outcome.is_error:
        raise ToolError(outcome.content, error_type=outcome.error_type or "tool_error")
    if ctx.call.name in FILE_READ_TOOLS:
        await _file_read_activation(ctx)
    return outcome.content


async def _file_read_activation(ctx: CallContext) -> None:
    """A host tool read a listed SKILL.md (file-based agents, seed 001): that is an
    activation, recorded like one (trigger ``file-read``). A path that a skill's
    ``trigger-files`` match activates that skill (trigger ``triggered``)."""
    try:
        args = msgspec.json.decode(ctx.call.arguments)
    except msgspec.DecodeError:
        return
    if not isinstance(args, dict):
        return
    paths = {p for p in (args.get(key) for key in ("path", "file_path")) if isinstance(p, str)}
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
    fired: dict[str, str] = {}
    for skill in view.catalog.values():
        if skill.triggers is not None and skill.triggers.files:
            why = next(filter(None, (file_trigger(skill.triggers, p) for p in sorted(paths))), None)
            if why is not None:
                fired[skill.name] = why
    await activate_triggered(ctx, fired)


def message_triggers(catalog: Mapping[str, SkillInfo], text: str) -> dict[str, str]:
    """The skills of ``catalog`` whose declared triggers ``text`` (a user's message)
    fires, with the trigger (pure: replay and re-drive fire the same)."""
    fired: dict[str, str] = {}
    for skill in catalog.values():
        if skill.triggers is not None:
            why = message_trigger(skill.triggers, text)
            if why is not None:
                fired[skill.name] = why
    return fired


async def activate_triggered(ctx: CallContext, fired: Mapping[str, str]) -> None:
    """Activate the skills whose triggers fired and that are not active, in name order,
    as many as the cap leaves room for; the others record why they were not."""
    view = ctx.view
    names = [n for n in sorted(fired) if view.active_skill(n) is None]
    room = max(view.config.max_active_skills - len(view.active), 0)
    for name in names[room:]:
        reason = (
            f"triggered by {fired[name]}, but {view.config.max_active_skills} skills are "
            "already active"
        )
        ctx.rec.add(SkillActivationFailed(name=name, reason=reason, call_id=ctx.call.id or None))
    if names[:room]:
        with contextlib.suppress(ToolError):  # recorded as activation_failed
            await activate(ctx, names[:room], mode="add", trigger="triggered", fired=fired)


# -- shared gates ---------------------------------------------------------------------


def _deny(
    ctx: CallContext, rule: str, reason: str, skill: ActiveSkill | None = None
) -> PolicyError:
    return PolicyError(
        PolicyDenied(
            call_id=ctx.call.id,
            tool=ctx.call.name,
            rule=rule,
            reason=reason,
            skill=skill.name if skill else None,
        )
    )


def _decide(
    ctx: CallContext,
    tool: str,
    *,
    skill: ActiveSkill | None = None,
    path: str | None = None,
    args: tuple[str, ...] = (),
    definition: ToolDef | None = None,
) -> Decision:
    """The one question a plan asks policy about its call (``_policy.decide``)."""
    view = ctx.view
    return decide(
        view.config.policy,
        view.active,
        view.grants,
        tool,
        skill=skill,
        path=path,
        args=args,
        definition=definition,
    )


def _settings(decision: Decision) -> SkillSettings:
    if decision.settings is None:  # pragma: no cover - decide() sets it for a skill's call
        raise AssertionError("a skill's call was decided without the skill's settings")
    return decision.settings


def _refused(ctx: CallContext, decision: Decision, skill: ActiveSkill) -> PolicyError:
    return _deny(ctx, decision.rule or "policy", decision.reason, skill)


def _allowlist_reason(view: View, tool: str) -> str:
    return allowlist_reason(allowlist(view.active), tool)


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
        return _checked_path(path)
    except PathRefusedError as e:
        raise ToolError(str(e), error_type="path_refused") from None


@functools.lru_cache(maxsize=1024)
def _checked_path(path: str) -> str:
    """(Remembered: a model reads the same few files again and again; a refusal is
    not remembered, it raises.)"""
    return "/".join(check_relative_path(path))


def _listing(catalog: Mapping[str, object], limit: int = 40) -> str:
    names = list(catalog)
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
