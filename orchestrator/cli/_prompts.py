"""The terminal as one of skillog's human channels: questions (an approval, an MCP
server's form) asked on it can be withdrawn when another channel answers first
(``skillog approve``, ``skillog approvals answer``, the service's API or console).

``input()`` in a thread cannot be withdrawn (the thread reads on, and swallows the next
answer), so lines are read from the terminal's descriptor when it is readable, which
trio can stop waiting for; what was typed into a withdrawn prompt is discarded."""

from __future__ import annotations

import contextlib
import getpass
import os
import termios

import msgspec
import trio

from eventlog import visible

from .._effects import ApprovalDecision, ApprovalRequest, ElicitationAnswer, ElicitationRequest
from .._policy import suggested_rule


class Terminal:
    """Line input from the terminal on ``fd`` (standard input), each prompt
    cancellable."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self._pending = b""

    async def ask(self, prompt: str) -> str:
        """The next line typed after ``prompt``; ``EOFError`` at the end of input."""
        print(prompt, end="", flush=True)
        while b"\n" not in self._pending:
            await trio.lowlevel.wait_readable(self.fd)
            chunk = os.read(self.fd, 4096)
            if not chunk:
                raise EOFError
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(errors="replace")

    def withdraw(self, line: str) -> None:
        """End a question nobody needs answered any more, saying why on its own line
        (``line`` made visible); what was typed into it is thrown away."""
        self._pending = b""
        with contextlib.suppress(termios.error):  # not a terminal after all
            termios.tcflush(self.fd, termios.TCIFLUSH)
        print(f"\n{visible(line)}", flush=True)


def terminal_user() -> str:
    """Who answers at this terminal, as recorded: ``terminal (USER)``."""
    try:
        return f"terminal ({getpass.getuser()})"
    except (OSError, KeyError):  # no user name in the environment nor the passwd file
        return "terminal"


class TerminalApprovals:
    """An approval asked on the terminal (``y`` once, ``s`` always for the skill, ``p``
    always for a rule, ``x`` never for it, anything else no), withdrawn when a decision
    from another process holds first (:class:`orchestrator.Approver`)."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        rule = suggested_rule(request.path, request.tool)
        asked = f"approve {request.tool} for {request.skill or 'host'}: {request.action}?"
        prompt = (
            f"{visible(asked)}\n"
            f"  y: once   s: always for this skill   p: always for {visible(rule)}   "
            f"x: never for {visible(rule)}   [y/s/p/x/N] "
        )
        answer = (await self.terminal.ask(prompt)).strip().lower()
        remember = {"s": "skill", "p": f"pattern:{rule}", "x": f"pattern:{rule}"}.get(answer)
        if remember == "skill" and request.skill is None:
            remember = f"pattern:{rule}"
        return ApprovalDecision(
            approved=answer in ("y", "yes", "s", "p"),
            decided_by=terminal_user(),
            remember=remember,
        )

    def withdrawn(self, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        verdict = "approved" if decision.approved else "denied"
        self.terminal.withdraw(
            f"  (approval of call {request.call_id} withdrawn: {verdict} by "
            f"{decision.decided_by} first)"
        )


class TerminalForms:
    """An MCP server's form asked on the terminal field by field (``y`` fill in, ``n``
    decline, anything else cancel), withdrawn when an answer from another process
    holds first (:class:`orchestrator.Elicitor`)."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal

    async def __call__(self, request: ElicitationRequest) -> ElicitationAnswer:
        schema = msgspec.json.decode(request.schema)
        by = terminal_user()
        asked = f"MCP server {request.server} asks: {request.message}"
        prompt = f"{visible(asked)}\n  y: fill in   n: decline   [y/n/C(ancel)] "
        answer = (await self.terminal.ask(prompt)).strip().lower()
        if answer in ("n", "no"):
            return ElicitationAnswer(action="decline", decided_by=by)
        if answer not in ("y", "yes"):
            return ElicitationAnswer(action="cancel", decided_by=by)
        values: dict[str, object] = {}
        required = schema.get("required", [])
        for name, field in schema.get("properties", {}).items():
            kind = field.get("type", "string")
            label = visible(f"  {name} ({kind}{', required' if name in required else ''}): ")
            raw = await self.terminal.ask(label)
            if raw or name in required:
                values[name] = typed(raw, kind)
        content = msgspec.json.encode(values).decode()
        return ElicitationAnswer(action="accept", decided_by=by, content=content)

    def withdrawn(self, request: ElicitationRequest, taken: ElicitationAnswer) -> None:
        if taken.decided_by == "timeout":
            why = "no answer in time: the server is told cancel"
        else:
            verb = {"accept": "filled in", "decline": "declined"}.get(taken.action, "cancelled")
            why = f"{verb} by {taken.decided_by} first"
        self.terminal.withdraw(f"  (form from MCP server {request.server} withdrawn: {why})")


def typed(raw: str, kind: str) -> object:
    """A typed value as the form asks for it; text that does not parse stays text (the
    runtime then finds the answer does not fit the form)."""
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return msgspec.json.decode(raw.strip())
    except (ValueError, msgspec.DecodeError):
        return raw
    if kind == "boolean":
        return raw.strip().lower() in ("y", "yes", "true", "1")
    if kind == "array":  # a multi-select: the choices, separated by commas
        return [choice.strip() for choice in raw.split(",") if choice.strip()]
    return raw
