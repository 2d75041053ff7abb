"""``skillog log ...``: the event log's own commands, with the runtime's session grammar.

The commands live with the generic log (``eventlog._cli``), which knows no event types.
Here, where the log meets the runtime, ``verify`` and ``checkpoint`` are given the
runtime's verdict (``_verdict``: the grammar of skillog's streams and the blobs its
events reference), so ``skillog log verify`` decides exactly as ``replay``, the
service and the console do before they show a session.
"""

from __future__ import annotations

import argparse

from eventlog import _cli

from .._catalog import SESSIONS, ended_before
from .._verdict import verdict

add_arguments = _cli.add_arguments


def run(args: argparse.Namespace) -> int:
    """Run the ``log`` subcommand in ``args`` with the runtime's verdict (and its
    session catalog, for reindex, import and archive, which takes the sessions that
    ended)."""
    return _cli.run(args, checker=verdict, projection=SESSIONS, selector=ended_before)
