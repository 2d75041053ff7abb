"""The ``skillog`` command: a thin dispatcher over the packages' own command modules.

Each subcommand lives next to the library it drives and is imported only when used,
so ``skillog --help`` stays fast and the layers stay independent. A command module
provides ``add_arguments(parser)`` and ``run(args) -> int``.

Exit codes: 0 success; 1 a check ran and failed (verify, validate, replay); 2 the input
could not be used (bad database, file or argument); 130 interrupted; 141 the output pipe
was closed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from eventlog import SkillogError, os_error_message, visible

# name -> (module, one-line help). Modules are imported lazily.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "orchestrator.cli._demo",
        "run a complete scripted session on the bundled example skills",
    ),
    "run": ("orchestrator.cli._session", "run a real session against a model provider"),
    "sessions": ("orchestrator.cli._session", "list the sessions in a database with their status"),
    "resume": ("orchestrator.cli._session", "resume a session from its log where it stopped"),
    "cancel": (
        "orchestrator.cli._cancel",
        "end a session as cancelled, its open calls resolved by their effect class",
    ),
    "submit": ("orchestrator.cli._fleet", "queue a session for the workers of a database"),
    "worker": ("orchestrator.cli._fleet", "claim and drive queued or orphaned sessions"),
    "serve": (
        "orchestrator.cli._serve",
        "serve the HTTP API, live events and web console (with in-process workers)",
    ),
    "policy": (
        "orchestrator.cli._policy",
        "show the policy a new session would run under, or the one a session recorded",
    ),
    "approvals": ("orchestrator.cli._approvals", "list the approval requests sessions wait for"),
    "approve": ("orchestrator.cli._approvals", "approve a pending request (any process)"),
    "deny": ("orchestrator.cli._approvals", "deny a pending request (any process)"),
    "mcp": (
        "orchestrator.cli._mcp",
        "serve the skills runtime to MCP clients: skillog mcp serve",
    ),
    "skills": ("orchestrator.cli._skills", "list, validate, install and materialize skills"),
    "log": (
        "orchestrator.cli._log",
        "inspect, verify, checkpoint, export and import the event log",
    ),
    "replay": ("replay._cli", "replay a session from its log and prove every prompt"),
    "otel": ("otel._cli", "export traces and metrics of recorded sessions over OTLP"),
}


def _parser(command: str | None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser | None]:
    """The top-level parser, and the parser of ``command`` (its arguments added)."""
    parser = argparse.ArgumentParser(
        prog="skillog",
        description="An event-sourced, replayable runtime for Agent Skills.",
    )
    parser.add_argument(
        "--version", action="version", version=f"skillog {importlib.metadata.version('skillog')}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = None
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(cmd)
            chosen = cmd
    return parser, chosen


GLOBAL_OPTIONS = ("--db",)
"""Options every command takes, accepted before or after the command and its action."""


def _split_globals(args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` without the global options, and those options (with their values)."""
    rest: list[str] = []
    found: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg in GLOBAL_OPTIONS and i + 1 < len(args):
            found += args[i : i + 2]
            i += 2
            continue
        if arg.startswith(tuple(f"{o}=" for o in GLOBAL_OPTIONS)):
            found.append(arg)
        else:
            rest.append(arg)
        i += 1
    return rest, found


def _placed(
    rest: list[str], found: list[str], command: str, cmd: argparse.ArgumentParser
) -> list[str]:
    """Put the global options where the command's parser takes them: right after the
    command when the command itself declares them (``skills --db X list``), else at the
    end, where its action's parser does (``log verify --db X``)."""
    if not found:
        return rest
    declared = any(o in cmd._option_string_actions for o in GLOBAL_OPTIONS)
    at = rest.index(command) + 1 if declared else len(rest)
    return rest[:at] + found + rest[at:]


def _leaf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser ``args`` went through (``skillog log verify`` -> verify's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _leaf(chosen, args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``skillog`` console script; returns the exit code."""
    rest, found = _split_globals(list(sys.argv[1:] if argv is None else argv))
    command = next((a for a in rest if not a.startswith("-")), None)
    parser, cmd = _parser(command if command in COMMANDS else None)
    if command is not None and cmd is not None:
        rest = _placed(rest, found, command, cmd)
    else:
        rest += found
    args, unknown = parser.parse_known_args(rest)
    if unknown:  # argparse would blame the top level; name the command that failed
        _leaf(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        if getattr(args, "trusted_key", False) is None and getattr(args, "checkpoint", None):
            # The joining layer knows the configuration file; eventlog and replay do not.
            from orchestrator.skills import trusted_keys_default

            default = trusted_keys_default()
            args.trusted_key = None if default is None else Path(default)
        code: int = module.run(args)
    except BaseExceptionGroup as group:  # a nursery's wrapping: report what is inside it
        errors = _leaves(group)
        if not all(isinstance(e, _REPORTED) for e in errors):
            raise
        return _failed(args.command, errors[0])
    except _REPORTED as e:
        return _failed(args.command, e)
    return code


_REPORTED = (SkillogError, KeyboardInterrupt, OSError)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return out


def _failed(command: str, e: BaseException) -> int:
    """Report ``e`` in one line on stderr; returns the exit code."""
    if isinstance(e, SkillogError):
        print(f"skillog {command}: error: {visible(str(e), lines=True)}", file=sys.stderr)
        return e.exit_code
    if isinstance(e, KeyboardInterrupt):
        print(f"skillog {command}: interrupted", file=sys.stderr)
        return 130
    if isinstance(e, BrokenPipeError):
        # The reader went away (`skillog ... | head`): stop quietly, as Unix tools do, and
        # keep Python from complaining again while flushing stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    assert isinstance(e, OSError)  # one not wrapped where it happened: still one line
    where = "" if e.filename is None else f"{os.fsdecode(e.filename)}: "
    print(f"skillog {command}: error: {where}{os_error_message(e)}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
