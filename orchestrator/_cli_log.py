"""``skillog log ...``: the event log's own commands, with the runtime's session grammar.

The commands live with the generic log (``eventlog._cli``), which knows no event types.
Here, where the log meets the runtime, ``verify`` and ``checkpoint`` are given the
grammar of skillog's streams (``_grammar``), so ``skillog log verify`` checks exactly
what ``replay``, the service and the console check before they show a session.
"""

from __future__ import annotations

import argparse

from eventlog import _cli

from ._catalog import SESSIONS
from ._grammar import session_grammar

add_arguments = _cli.add_arguments


def run(args: argparse.Namespace) -> int:
    """Run the ``log`` subcommand in ``args`` with the session grammar."""
    return _cli.run(args, grammar=session_grammar, projection=SESSIONS)
