"""Policy: trust tiers and the ``allowed-tools`` allowlist, as pure decisions.

``allowed-tools`` (``Bash(git:*) Read Write``) is a hard allowlist: while any active
skill declares it, only calls some declaring skill permits may run; the others are
refused with a ``policy.denied`` event. How a rule maps to skillog's tools:

- ``skills.load`` and ``skills.unload`` are always allowed (a skill must not be able
  to trap the model inside itself).
- ``Read`` / ``skills.read`` allow ``skills.read``; ``Read(references/*)`` only paths
  matching the glob.
- ``Bash`` / ``skills.run_script`` allow ``skills.run_script``; ``Bash(prefix:*)`` only
  commands (script path, then arguments, shell-quoted) starting with ``prefix``;
  ``Bash(cmd)`` only that exact command.
- ``mcp__<server>__<tool>`` allows that MCP tool; ``mcp__<server>`` and
  ``mcp__<server>__*`` every tool of that server (``mcp__*``: every MCP tool).
- Any other ``Name`` allows the host tool called ``Name``. ``Name(pattern)`` on a host
  tool allows nothing: skillog cannot know what the pattern would apply to, and an
  allowlist must fail closed.

Several declaring skills combine by union: a call runs if any declaring skill permits
it. Skills that declare nothing do not restrict.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import shlex
from collections.abc import Collection, Sequence
from typing import Literal, TypeVar

import msgspec

from ._events import (
    ApprovalRemembered,
    ApprovalRequested,
    Budget,
    McpToolDef,
    PolicyConfig,
    PolicyOverride,
    Sandbox,
    ToolDef,
)
from ._state import ActiveSkill
from .scripts import LimitsOverride, ScriptLimits

ALWAYS_ALLOWED = frozenset({"skills.load", "skills.unload"})
READ_TOOLS = frozenset({"Read", "skills.read"})
SCRIPT_TOOLS = frozenset({"Bash", "skills.run_script"})
TIERS = ("builtin", "org", "user", "third-party")

MCP_PREFIX = "mcp__"
_RULE = re.compile(r"([A-Za-z0-9_.\-]+\*?)(?:\((.*)\))?\Z", re.S)


class ToolRule(msgspec.Struct, frozen=True):
    """One ``allowed-tools`` entry: a tool name and an optional argument pattern."""

    tool: str
    pattern: str | None = None


def parse_allowed_tools(text: str) -> tuple[ToolRule, ...]:
    """Split ``allowed-tools`` into rules. Entries are separated by whitespace outside
    parentheses; an entry that does not parse allows nothing."""
    return _parse_allowed_tools(text)


@functools.lru_cache(maxsize=1024)
def _parse_allowed_tools(text: str) -> tuple[ToolRule, ...]:
    # Cached: every prompt and every planned call parses each active skill's field
    # again (a character loop each; a service renders hundreds of prompts a second),
    # and the rules are immutable.
    rules: list[ToolRule] = []
    for token in _tokens(text):
        m = _RULE.match(token)
        if m:
            rules.append(ToolRule(m.group(1), m.group(2)))
    return tuple(rules)


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch.isspace() and depth == 0:
            if current:
                tokens.append("".join(current))
                current = []
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current.append(ch)
    if current:
        tokens.append("".join(current))
    return tokens


Allowlist = tuple[tuple[str, tuple[ToolRule, ...]], ...] | None
"""(skill name, rules) for each active skill that declares ``allowed-tools``; None when
no active skill restricts."""


def allowlist(active: Sequence[ActiveSkill]) -> Allowlist:
    declared = tuple(
        (s.name, parse_allowed_tools(s.allowed_tools))
        for s in active
        if s.allowed_tools is not None
    )
    return declared or None


def offered(rules: Allowlist, tool: str) -> bool:
    """Whether ``tool`` is offered to the model at all under ``rules``."""
    if rules is None or tool in ALWAYS_ALLOWED:
        return True
    return any(_names(rule, tool) for _, skill_rules in rules for rule in skill_rules)


def permits(rules: Allowlist, tool: str, *, path: str = "", args: Sequence[str] = ()) -> bool:
    """Whether one call may run under ``rules``; ``path``/``args`` are the call's file or
    script path and script arguments, which rule patterns are matched against."""
    if rules is None or tool in ALWAYS_ALLOWED:
        return True
    for _, skill_rules in rules:
        for rule in skill_rules:
            if _names(rule, tool) and _pattern_ok(rule, tool, path, args):
                return True
    return False


def restricting_skills(rules: Allowlist) -> str:
    return ", ".join(name for name, _ in rules or ())


def mcp_unlocks(allowed_tools: str, servers: Collection[str]) -> list[str]:
    """What a skill's ``allowed-tools`` unlocks of MCP servers' tools, one line per MCP
    rule (for the catalog): which server and which tools, and whether ``servers``
    (the configured ones) has that server."""
    lines = []
    for rule in parse_allowed_tools(allowed_tools):
        if not rule.tool.startswith(MCP_PREFIX):
            continue
        rest = rule.tool[len(MCP_PREFIX) :]
        server, _, tool = rest.partition("__")
        if rule.pattern is not None:
            what = "nothing (a pattern on an MCP tool allows nothing)"
        elif rest == "*":
            what, server = "every tool of every MCP server", ""
        elif not tool or tool == "*":
            what = f"every tool of MCP server {server}"
        elif tool.endswith("*"):
            what = f"the tools of MCP server {server} starting with {tool[:-1]!r}"
        else:
            what = f"the tool {tool} of MCP server {server}"
        missing = server and server.rstrip("*") not in servers
        note = " (not a configured server)" if missing else ""
        lines.append(f"{rule.tool}{f'({rule.pattern})' if rule.pattern else ''}: {what}{note}")
    return lines


def _names(rule: ToolRule, tool: str) -> bool:
    if tool == "skills.read":
        return rule.tool in READ_TOOLS
    if tool == "skills.run_script":
        return rule.tool in SCRIPT_TOOLS
    return rule.pattern is None and names_tool(rule.tool, tool)


def names_tool(name: str, tool: str) -> bool:
    """Whether a rule's tool name (or a policy's list entry) names ``tool``: itself, or
    for MCP tools also its server (``mcp__github``) or a prefix ending in ``*``
    (``mcp__github__*``, ``mcp__*``)."""
    if name == tool:
        return True
    if not tool.startswith(MCP_PREFIX) or not name.startswith(MCP_PREFIX):
        return False
    if name.endswith("*"):
        return tool.startswith(name[:-1])
    return tool.startswith(name + "__")


_INTERPRETER_WORDS: dict[str, tuple[str, ...]] = {
    ".py": ("python", "python3"),
    ".sh": ("bash", "sh"),
    ".bash": ("bash",),
    ".js": ("node",),
    ".mjs": ("node",),
    ".cjs": ("node",),
}
"""How a skill's authors write the command that runs a script of each extension."""


def script_commands(path: str, args: Sequence[str]) -> list[str]:
    """The command lines a ``Bash(...)`` pattern may be written against for running the
    skill's script ``path`` (relative to the skill root) with ``args``: the path itself,
    ``./path``, and each interpreter word followed by either (``python3 scripts/x.py``)."""
    ext = "." + path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    paths = [path, f"./{path}"]
    forms = [[p] for p in paths]
    forms += [[word, p] for word in _INTERPRETER_WORDS.get(ext, ()) for p in paths]
    return [shlex.join([*form, *args]) for form in forms]


def _pattern_ok(rule: ToolRule, tool: str, path: str, args: Sequence[str]) -> bool:
    if rule.pattern is None or rule.pattern in ("*", ""):
        return True
    if tool == "skills.read":
        return fnmatch.fnmatchcase(path, rule.pattern)
    prefix = rule.pattern[:-2] if rule.pattern.endswith(":*") else None
    for command in script_commands(path, args):
        if prefix is None and command == rule.pattern:
            return True
        if prefix is not None and (command == prefix or command.startswith(prefix + " ")):
            return True
    return False


class SkillSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The policy for one skill's calls: the session's policy with the overrides of the
    skill's tier, source and name applied, and the third-party floors on top."""

    tier: str
    approve: bool
    network: bool
    sandbox: Sandbox
    script_timeout_ms: int
    output_cap_bytes: int
    read_max_bytes: int
    nested_paths: bool
    preapprove: bool
    allow: tuple[str, ...]
    script_limits: ScriptLimits


def skill_settings(
    config: PolicyConfig, tier: str, *, source: str = "", name: str = ""
) -> SkillSettings:
    """What policy says for the skill ``name`` of ``tier`` from ``source`` (pure).

    Overrides apply in the order tier, source, skill; a field an override leaves out
    inherits, ``allow`` rules add up, ``script_limits`` merge field by field. Whatever
    they say, a third-party skill's scripts need an approval, run only in the sandbox
    and never reach a network, and its ``allowed-tools`` pre-approve nothing (seed 000).
    An unknown tier is treated as third-party."""
    tier = tier if tier in TIERS else "third-party"
    third_party = tier == "third-party"
    settings = SkillSettings(
        tier=tier,
        approve=tier in config.approve,
        network=tier in config.network,
        sandbox=config.sandbox,
        script_timeout_ms=config.script_timeout_ms,
        output_cap_bytes=config.output_cap_bytes,
        read_max_bytes=config.read_max_bytes,
        nested_paths=config.nested_paths,
        preapprove=tier in config.preapprove_tiers,
        allow=() if third_party else config.allow,
        script_limits=config.script_limits,
    )
    for override in (config.tiers.get(tier), config.sources.get(source), config.skills.get(name)):
        if override is not None:
            settings = _overridden(settings, override)
    if third_party:
        # Network only by an entry naming this very skill (recorded with a warning in
        # session.started; its runs still ask): never by tier or source.
        named = config.skills.get(name)
        network = named is not None and named.network is True
        settings = msgspec.structs.replace(
            settings, approve=True, network=network, sandbox="required", preapprove=False
        )
    return settings


T = TypeVar("T")


def _or(value: T | msgspec.UnsetType, inherited: T) -> T:
    return inherited if isinstance(value, msgspec.UnsetType) else value


def _overridden(settings: SkillSettings, override: PolicyOverride) -> SkillSettings:
    """``settings`` with what ``override`` sets, field by field and typed, so a field
    renamed on one side and not the other is a type error, not an override silently
    dropped (tests/orchestrator/test_policy.py checks both have the same fields)."""
    o = override
    return SkillSettings(
        tier=settings.tier,
        approve=_or(o.approve, settings.approve),
        network=_or(o.network, settings.network),
        sandbox=_or(o.sandbox, settings.sandbox),
        script_timeout_ms=_or(o.script_timeout_ms, settings.script_timeout_ms),
        output_cap_bytes=_or(o.output_cap_bytes, settings.output_cap_bytes),
        read_max_bytes=_or(o.read_max_bytes, settings.read_max_bytes),
        nested_paths=_or(o.nested_paths, settings.nested_paths),
        preapprove=_or(o.preapprove, settings.preapprove),
        allow=(*settings.allow, *_or(o.allow, ())),  # allow rules add up
        script_limits=_limits(settings.script_limits, o.script_limits),
    )


def _limits(limits: ScriptLimits, override: LimitsOverride | msgspec.UnsetType) -> ScriptLimits:
    if isinstance(override, msgspec.UnsetType):
        return limits
    o = override
    return ScriptLimits(
        cpu_s=_or(o.cpu_s, limits.cpu_s),
        memory_bytes=_or(o.memory_bytes, limits.memory_bytes),
        pids=_or(o.pids, limits.pids),
        file_bytes=_or(o.file_bytes, limits.file_bytes),
        open_files=_or(o.open_files, limits.open_files),
        stored_output_bytes=_or(o.stored_output_bytes, limits.stored_output_bytes),
    )


def settings_of(config: PolicyConfig, skill: ActiveSkill) -> SkillSettings:
    return skill_settings(config, skill.tier, source=skill.source, name=skill.name)


def preapproved_by(
    active: Sequence[ActiveSkill],
    config: PolicyConfig,
    tool: str,
    *,
    skill: ActiveSkill | None = None,
    path: str = "",
    args: Sequence[str] = (),
) -> str | None:
    """Who pre-approves a call that would need an approval, as recorded in
    ``approval.resolved``: an active skill whose tier's (or override's) ``preapprove``
    holds (never third-party) and whose ``allowed-tools`` list the call (seed 000 R6),
    else a rule of the policy's ``allow`` for ``skill`` (the script's skill; for a host
    tool, the session-wide ``allow``). None when someone must be asked."""
    for candidate in active:
        if candidate.allowed_tools is None or not settings_of(config, candidate).preapprove:
            continue
        rules = ((candidate.name, parse_allowed_tools(candidate.allowed_tools)),)
        if any(_names(r, tool) for r in rules[0][1]) and permits(rules, tool, path=path, args=args):
            tier = candidate.tier if candidate.tier in TIERS else "third-party"
            return f"allowed-tools of {candidate.name} ({tier})"
    return allowed_by_rule(config, tool, skill=skill, path=path, args=args)


def rule_matches(text: str, tool: str, *, path: str = "", args: Sequence[str] = ()) -> bool:
    """Whether the one ``allowed-tools`` rule ``text`` covers a call (pure); text that is
    not exactly one rule covers nothing."""
    rules = parse_allowed_tools(text)
    if len(rules) != 1:
        return False
    return _names(rules[0], tool) and _pattern_ok(rules[0], tool, path, args)


def granted_by(
    grants: Sequence[ApprovalRemembered],
    tool: str,
    *,
    skill: ActiveSkill | None,
    path: str = "",
    args: Sequence[str] = (),
) -> str | None:
    """The remembered grant that approves a call, as ``approval.resolved`` records it
    (``remembered: ...``), or None (pure)."""
    return _remembered(grants, True, tool, skill=skill, path=path, args=args)


def denied_by(
    grants: Sequence[ApprovalRemembered],
    tool: str,
    *,
    skill: ActiveSkill | None,
    path: str = "",
    args: Sequence[str] = (),
) -> str | None:
    """The remembered denial that refuses a call without asking (``remembered denial:
    ...``), or None (pure). A denial wins over a grant covering the same call."""
    return _remembered(grants, False, tool, skill=skill, path=path, args=args)


def _remembered(
    grants: Sequence[ApprovalRemembered],
    approved: bool,
    tool: str,
    *,
    skill: ActiveSkill | None,
    path: str,
    args: Sequence[str],
) -> str | None:
    name, hash_ = (skill.name, skill.hash) if skill is not None else (None, None)
    for grant in grants:
        if grant.approved is approved and grant_covers(
            grant, tool, skill=name, skill_hash=hash_, path=path, args=args
        ):
            return grant_label(grant)
    return None


def grant_label(grant: ApprovalRemembered) -> str:
    """The ``decided_by`` of a call a grant decided: ``remembered: RULE (by NAME)``, or
    ``remembered denial: ...``."""
    what = f"every call of {grant.skill}" if grant.scope == "skill" else grant.pattern
    kind = "remembered" if grant.approved else "remembered denial"
    return f"{kind}: {what} (by {grant.decided_by})"


def destructive_mcp(annotations: str) -> bool:
    """Whether an MCP tool's annotations (canonical JSON text, empty for none) say it
    is destructive: ``destructiveHint`` true and ``readOnlyHint`` not true. Hints are
    the server's word, not a guarantee: they only ever add a question."""
    if not annotations:
        return False
    try:
        hints = msgspec.json.decode(annotations)
    except msgspec.DecodeError:
        return False
    return (
        isinstance(hints, dict)
        and hints.get("destructiveHint") is True
        and hints.get("readOnlyHint") is not True
    )


def policy_warnings(config: PolicyConfig) -> tuple[str, ...]:
    """What ``session.started`` warns about the policy (pure): per-skill entries that
    give network, the one way a third-party skill's scripts reach it."""
    return tuple(
        f"policy gives network to the scripts of skill {name!r}, even if it is "
        "third-party (each run still asks)"
        for name, override in sorted(config.skills.items())
        if override.network is True
    )


def asks_for_what_it_does(config: PolicyConfig, definition: ToolDef | None) -> str | None:
    """Why a host or MCP tool call asks whatever the tier (pure): it is destructive, or
    its effect class is one ``approve_effects`` names; None otherwise."""
    if definition is None:
        return None
    if config.ask_destructive:
        if definition.destructive:
            return "declared destructive"
        if isinstance(definition, McpToolDef) and destructive_mcp(definition.annotations):
            return "annotated destructiveHint"
    if definition.effect in config.approve_effects:
        return f"its effect class is {definition.effect}"
    return None


def allowed_by_rule(
    config: PolicyConfig,
    tool: str,
    *,
    skill: ActiveSkill | None = None,
    path: str = "",
    args: Sequence[str] = (),
) -> str | None:
    """The policy ``allow`` rule that pre-approves a call, ignoring every skill's own
    ``allowed-tools`` (what an action does is not the skill's to approve)."""
    allow = settings_of(config, skill).allow if skill is not None else config.allow
    for text in allow:
        if rule_matches(text, tool, path=path, args=args):
            return f"policy allow {text}"
    return None


def grant_covers(
    grant: ApprovalRemembered,
    tool: str,
    *,
    skill: str | None,
    skill_hash: str | None,
    path: str = "",
    args: Sequence[str] = (),
) -> bool:
    """Whether ``grant`` covers a call (pure). A grant covers only calls of the skill it
    was given for, with the content hash that skill had then (a host-tool grant only
    host-tool calls), and of those only what its scope says: ``skill`` all of them,
    ``pattern`` those its one rule matches."""
    if grant.skill != skill or grant.skill_hash != skill_hash:
        return False
    if grant.scope == "skill":
        return skill is not None and skill_hash is not None
    return grant.pattern is not None and rule_matches(grant.pattern, tool, path=path, args=args)


REMEMBER_HELP = (
    "'skill' (every call of this skill in this session) or 'pattern:RULE' with one "
    "allowed-tools rule that matches this call, e.g. 'pattern:Bash(python3 scripts/x.py:*)'"
)


def remembered_grant(
    remember: str, request: ApprovalRequested, decided_by: str
) -> ApprovalRemembered:
    """The grant an approval that says "always" records, checked against the request it
    answers (pure). Raises ValueError when ``remember`` is not ``skill`` or
    ``pattern:RULE``, names a skill the call has none of, or is a rule that does not
    match the call itself: a grant never says more than the user saw."""
    scope, _, pattern = remember.partition(":")
    if scope == "skill" and not pattern:
        if request.skill is None or request.skill_hash is None:
            raise ValueError(
                f"call {request.call_id} is a host tool call, not a skill's: remember it "
                f"with 'pattern:{request.tool}'"
            )
        return ApprovalRemembered(
            call_id=request.call_id,
            scope="skill",
            skill=request.skill,
            skill_hash=request.skill_hash,
            decided_by=decided_by,
        )
    if scope != "pattern" or not pattern.strip():
        raise ValueError(f"cannot remember {remember!r}; use {REMEMBER_HELP}")
    pattern = pattern.strip()
    if len(parse_allowed_tools(pattern)) != 1 or len(_tokens(pattern)) != 1:
        raise ValueError(f"{pattern!r} is not one allowed-tools rule; use {REMEMBER_HELP}")
    if not rule_matches(pattern, request.tool, path=request.path or "", args=request.args):
        raise ValueError(
            f"{pattern!r} does not match call {request.call_id} ({request.action[:200]}); "
            "a remembered rule must cover the call it approves"
        )
    return ApprovalRemembered(
        call_id=request.call_id,
        scope="pattern",
        skill=request.skill,
        skill_hash=request.skill_hash,
        pattern=pattern,
        decided_by=decided_by,
    )


def suggested_rule(path: str | None, tool: str) -> str:
    """The rule an approver is offered to remember: the script with any arguments
    (``Bash(scripts/x.py:*)``), or the host tool's name (the terminal and the console)."""
    return f"Bash({path}:*)" if path is not None else tool


class ScriptGate(msgspec.Struct, frozen=True, kw_only=True):
    """What policy demands before and while a script runs."""

    needs_approval: bool
    network: bool
    sandbox: Sandbox


def script_gate(config: PolicyConfig, tier: str, *, source: str = "", name: str = "") -> ScriptGate:
    """Trust tiers (seed 000): builtin/org run in the sandbox; user scripts need an
    approval; third-party scripts need an approval and run only inside the sandbox,
    without network, whatever ``config`` says (fail closed: no bubblewrap, no run).
    Overrides for the skill's tier, source and name apply (:func:`skill_settings`)."""
    settings = skill_settings(config, tier, source=source, name=name)
    return ScriptGate(
        needs_approval=settings.approve, network=settings.network, sandbox=settings.sandbox
    )


def host_tool_needs_approval(config: PolicyConfig, tool: str) -> bool:
    """Whether ``policy.approve_host_tools`` names ``tool`` (``"*"``: every host and MCP
    tool; MCP tools also by server or prefix, as in ``allowed-tools``), or, for an MCP
    tool, ``policy.mcp.approve``."""
    names = config.approve_host_tools
    if tool.startswith(MCP_PREFIX):
        names = (*names, *config.mcp.approve)
    return _named_in(names, tool)


def _named_in(names: Sequence[str], tool: str) -> bool:
    return "*" in names or any(names_tool(name, tool) for name in names)


Verdict = Literal["allowed", "denied", "needs_approval"]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """Policy's one answer about one call (:func:`decide`): why it may run, or not.

    ``denied``: ``rule`` refused it (``allowed-tools``) and ``reason`` says why, as the
    model reads it. ``needs_approval``: ``rule`` asks for one (``approve`` of the
    skill's tier or override, ``approve_host_tools``, ``mcp.approve``) and
    ``preapproved_by`` names what already allows the call (an active skill's
    ``allowed-tools``, a policy ``allow`` rule, a remembered grant), None when someone
    must be asked. ``settings`` is the policy of the skill whose file or script the call
    uses (limits, sandbox, network), None for other tools. ``because`` says what the
    action does that asks whatever the tier (``declared destructive``, ``with
    network``); ``denied_by`` names a remembered denial that refuses it unasked."""

    verdict: Verdict
    rule: str | None = None
    reason: str = ""
    preapproved_by: str | None = None
    settings: SkillSettings | None = None
    because: str | None = None
    denied_by: str | None = None


def decide(
    config: PolicyConfig,
    active: Sequence[ActiveSkill],
    grants: Sequence[ApprovalRemembered],
    tool: str,
    *,
    skill: ActiveSkill | None = None,
    path: str | None = None,
    args: Sequence[str] = (),
    definition: ToolDef | None = None,
) -> Decision:
    """Everything policy says about one call of ``tool``, in one record (pure).

    ``skill``, ``path`` and ``args`` are the skill whose file (``skills.read``) or script
    (``skills.run_script``) the call names, and the script's arguments: the allowlist's
    patterns apply to them. A host or MCP tool reaches here only when the allowlist
    offers it (the tool list the model is shown), where no pattern applies; its recorded
    ``definition`` says what it does (destructive, its effect class).

    What an action does asks whatever the tier (issue 29): a script given network, a
    destructive tool, a tool of an effect class ``approve_effects`` names. Then only a
    policy ``allow`` rule or a remembered grant answers unasked, never a skill's own
    ``allowed-tools``. A remembered denial covering the call is named in ``denied_by``."""
    settings = settings_of(config, skill) if skill is not None else None
    if path is not None:
        rules = allowlist(active)
        if not permits(rules, tool, path=path, args=args):
            why = allowlist_reason(rules, tool, path)
            return Decision(verdict="denied", rule="allowed-tools", reason=why, settings=settings)
    because: str | None = None
    if tool == "skills.run_script":
        if config.scripts == "off":
            reason = (
                "this session's policy turns script execution off (policy scripts: off); "
                "do the task without running scripts, or ask the user to allow them"
            )
            return Decision(verdict="denied", rule="scripts: off", reason=reason, settings=settings)
        rule = "approve" if settings is not None and settings.approve else None
        if settings is not None and settings.network and config.ask_destructive:
            because = "with network"
            rule = rule or "network"
    elif tool == "skills.read":
        rule = None
    else:
        because = asks_for_what_it_does(config, definition)
        if host_tool_needs_approval(config, tool):
            in_mcp = tool.startswith(MCP_PREFIX) and not _named_in(config.approve_host_tools, tool)
            rule = "mcp.approve" if in_mcp else "approve_host_tools"
        else:
            rule = "destructive" if because else None
    if rule is None:
        return Decision(verdict="allowed", settings=settings)
    at = path or ""
    trusted = (
        allowed_by_rule(config, tool, skill=skill, path=at, args=args)
        if because
        else preapproved_by(active, config, tool, skill=skill, path=at, args=args)
    )
    by = trusted or granted_by(grants, tool, skill=skill, path=at, args=args)
    return Decision(
        verdict="needs_approval",
        rule=rule,
        preapproved_by=by,
        settings=settings,
        because=because,
        denied_by=denied_by(grants, tool, skill=skill, path=at, args=args),
    )


def allowlist_reason(rules: Allowlist, tool: str, path: str = "") -> str:
    """Why the allowlist refuses ``tool`` (on ``path``), as the model reads it."""
    target = f"{tool} {path}".strip()
    return (
        f"{target} is not in the allowed-tools of the active skill(s) "
        f"{restricting_skills(rules)}; unload them to use other tools"
    )


def budget_cost(
    budget: Budget,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cached: tuple[int, int] = (0, 0),
) -> int | None:
    """What these tokens cost in micro-USD at the budget's ``prices`` for ``model``
    (cached input at its ``cache_prices``, when it has them), or None when it has no
    price for the model (pure; the budget check and the trace both use it)."""
    price = next((p for p in budget.prices if p[0] == model), None)
    if price is None:
        return None
    read, written = cached
    cache = next((p for p in budget.cache_prices if p[0] == model), None)
    uncached = input_tokens - (read + written if cache is not None else 0)
    spent = uncached * price[1] + output_tokens * price[2]
    if cache is not None:  # the input price otherwise (``uncached`` has them)
        spent += read * cache[1] + written * cache[2]
    return spent // 1_000_000


def over_budget(
    budget: Budget,
    model: str,
    input_tokens: int,
    output_tokens: int,
    wall_ms: int,
    cached: tuple[int, int] = (0, 0),
) -> str | None:
    """Which budget a session has used up, as ``session.ended`` records it
    (``tokens: 5120 input tokens, the budget is 5000``), or None (pure)."""
    if budget.input_tokens and input_tokens >= budget.input_tokens:
        return f"tokens: {input_tokens} input tokens, the budget is {budget.input_tokens}"
    if budget.output_tokens and output_tokens >= budget.output_tokens:
        return f"tokens: {output_tokens} output tokens, the budget is {budget.output_tokens}"
    if budget.cost_micro_usd:
        cost = budget_cost(budget, model, input_tokens, output_tokens, cached)
        if cost is not None and cost >= budget.cost_micro_usd:
            return f"cost: about {cost} micro-USD spent, the budget is {budget.cost_micro_usd}"
    if budget.wall_ms and wall_ms >= budget.wall_ms:
        return f"wall time: {wall_ms} ms, the budget is {budget.wall_ms} ms"
    return None
