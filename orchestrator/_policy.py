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
import re
import shlex
from collections.abc import Collection, Sequence
from typing import Literal

import msgspec

from ._events import Budget, PolicyConfig
from ._state import ActiveSkill

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


def preapproved_by(
    active: Sequence[ActiveSkill],
    config: PolicyConfig,
    tool: str,
    *,
    path: str = "",
    args: Sequence[str] = (),
) -> str | None:
    """Who pre-approves a call that would need an approval: an active skill of a tier
    in ``config.preapprove_tiers`` (never third-party) whose ``allowed-tools`` lists
    the call (seed 000 R6). Its name and tier, as recorded in ``approval.resolved``."""
    for skill in active:
        tier = skill.tier if skill.tier in TIERS else "third-party"
        if skill.allowed_tools is None or tier == "third-party":
            continue
        if tier not in config.preapprove_tiers:
            continue
        rules = ((skill.name, parse_allowed_tools(skill.allowed_tools)),)
        if any(_names(r, tool) for r in rules[0][1]) and permits(rules, tool, path=path, args=args):
            return f"allowed-tools of {skill.name} ({tier})"
    return None


class ScriptGate(msgspec.Struct, frozen=True, kw_only=True):
    """What policy demands before and while a script of a given tier runs."""

    needs_approval: bool
    network: bool
    sandbox: Literal["required", "preferred", "off"]


def script_gate(config: PolicyConfig, tier: str) -> ScriptGate:
    """Trust tiers (seed 000): builtin/org run in the sandbox; user scripts need an
    approval; third-party scripts need an approval and run only inside the sandbox,
    without network, whatever ``config.sandbox`` says (fail closed: no bubblewrap, no
    run). An unknown tier is treated as third-party."""
    tier = tier if tier in TIERS else "third-party"
    third_party = tier == "third-party"
    return ScriptGate(
        needs_approval=tier in config.approve or third_party,
        network=tier in config.network and not third_party,
        sandbox="required" if third_party else config.sandbox,
    )


def host_tool_needs_approval(config: PolicyConfig, tool: str) -> bool:
    """Whether ``policy.approve_host_tools`` names ``tool`` (``"*"``: every host and MCP
    tool; MCP tools also by server or prefix, as in ``allowed-tools``)."""
    return "*" in config.approve_host_tools or any(
        names_tool(name, tool) for name in config.approve_host_tools
    )


def over_budget(
    budget: Budget, model: str, input_tokens: int, output_tokens: int, wall_ms: int
) -> str | None:
    """Which budget a session has used up, as ``session.ended`` records it
    (``tokens: 5120 input tokens, the budget is 5000``), or None (pure)."""
    if budget.input_tokens and input_tokens >= budget.input_tokens:
        return f"tokens: {input_tokens} input tokens, the budget is {budget.input_tokens}"
    if budget.output_tokens and output_tokens >= budget.output_tokens:
        return f"tokens: {output_tokens} output tokens, the budget is {budget.output_tokens}"
    if budget.cost_micro_usd:
        price = next((p for p in budget.prices if p[0] == model), None)
        if price is not None:
            cost = (input_tokens * price[1] + output_tokens * price[2]) // 1_000_000
            if cost >= budget.cost_micro_usd:
                return f"cost: about {cost} micro-USD spent, the budget is {budget.cost_micro_usd}"
    if budget.wall_ms and wall_ms >= budget.wall_ms:
        return f"wall time: {wall_ms} ms, the budget is {budget.wall_ms} ms"
    return None
