"""The command reference, ``docs/cli.md``, rendered from the CLI's own parsers.

``python -m orchestrator.cli._reference > docs/cli.md`` regenerates it; a test fails
when the file and the parsers disagree, so the reference cannot drift from the CLI.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from ._main import COMMANDS, _parser

WIDTH = "88"  # help is wrapped to $COLUMNS: fixed, so the text is the same everywhere

HEADER = """\
# Command reference

Generated from the CLI's parsers by `python -m orchestrator.cli._reference > docs/cli.md`
(a test checks it is current). Every command takes `--db` before or after the command
and its action. Exit codes: 0 success; 1 a check ran and failed (verify, validate,
replay); 2 the input could not be used; 130 interrupted; 141 the output pipe was closed.
Commands that print data take `--json` (shapes in each command's help).
"""


def render() -> str:
    """The whole reference, as Markdown."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        sections = [HEADER]
        for name in COMMANDS:
            parser = _parser(name)[1]
            assert parser is not None
            sections += _sections(parser)
        return "\n".join(sections)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _sections(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield f"## `{parser.prog}`\n\n```\n{parser.format_help().rstrip()}\n```\n"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases once
                yield from _sections(sub)


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
