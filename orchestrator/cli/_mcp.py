"""``skillog mcp serve``: the skills runtime as an MCP server (docs/mcp.md)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import trio

from eventlog import SkillogError, describe_db, visible
from eventlog._terminal import log_to_stderr

from .._catalog import open_log
from ..skills import Tier
from ._session import add_db, discover, stop_on_signals

if TYPE_CHECKING:
    from ..mcp_server import ServeConfig, ServedSession

DEFAULT_BIND = "127.0.0.1:8766"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve skills to MCP clients (one session of the log per connection)",
        description="Serve the skills runtime to MCP clients: the catalog, skills.load, "
        "skills.unload, skills.read, skills.run_script (sandboxed, under policy) and the "
        "loaded skills' files as resources. Every connection is a session of the log.",
    )
    add_db(serve)
    serve.add_argument(
        "--skills", action="append", default=[], metavar="DIR",
        help="a skill directory or a folder of skills (repeatable), on top of the configured "
        "and conventional sources",
    )  # fmt: skip
    serve.add_argument(
        "--tier", default="user", choices=[t.value for t in Tier],
        help="trust tier of --skills directories (default: user: their scripts need an "
        "approval, asked with MCP elicitation)",
    )  # fmt: skip
    serve.add_argument("--project", default=".", help="project directory for .agents/skills")
    serve.add_argument(
        "--transport", choices=("stdio", "http"), default="stdio",
        help="stdio (default: one client, the process that started this one) or http "
        "(streamable HTTP at /mcp, any number of clients)",
    )  # fmt: skip
    serve.add_argument(
        "--bind", default=DEFAULT_BIND,
        help=f"HOST:PORT of --transport http (default: {DEFAULT_BIND}, loopback only); "
        "beyond loopback every request needs a bearer token of `skillog serve --add-token`",
    )  # fmt: skip
    serve.add_argument(
        "--idle-timeout", type=float, default=600.0, metavar="SECONDS",
        help="--transport http: end a session with no request for this long (its client "
        "left without DELETE), recorded as its end (default: 600)",
    )  # fmt: skip
    serve.add_argument(
        "--max-calls", type=int, default=10_000,
        help="calls one connection may make before its session ends (default: 10000)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:
        from ..mcp_server import ServeConfig
    except ImportError as e:
        raise SkillogError(
            f"skillog mcp serve needs the mcp extra ({e}): pip install 'skillog[mcp]'"
        ) from e
    if args.max_calls < 1:
        print("skillog mcp serve: --max-calls must be 1 or more", file=sys.stderr)
        return 2
    if not 0 < args.idle_timeout < 10**7:
        print(
            "skillog mcp serve: --idle-timeout must be a positive number of seconds",
            file=sys.stderr,
        )
        return 2
    log_to_stderr()
    found = discover(args.skills, Tier(args.tier), project=args.project, db=args.db)
    config = ServeConfig(
        skills=tuple(found.skills),
        hidden=tuple(found.hidden),
        max_calls=args.max_calls,
        idle_timeout_s=args.idle_timeout,
    )
    return trio.run(_serve, args, config)


async def _serve(args: argparse.Namespace, config: ServeConfig) -> int:
    from ..mcp_server import serve_stdio

    def ended(served: ServedSession) -> None:
        print(
            f"skillog mcp serve: session {served.id} of {visible(served.model.client)} ended; "
            f"replay it with: skillog replay {served.id} --db {args.db}",
            file=sys.stderr,
            flush=True,
        )

    async with open_log(args.db) as store:
        if args.transport == "stdio":
            await serve_stdio(store, config, on_end=ended)
            return 0
        from ..mcp_server import serve_http

        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signals, stop, "skillog mcp serve", "ending the sessions")
            urls = await nursery.start(
                lambda task_status: serve_http(
                    store, config, args.bind, stop=stop, on_end=ended, task_status=task_status
                )
            )
            print(
                f"skillog mcp serve: {', '.join(u + '/mcp' for u in urls)} on "
                f"{describe_db(args.db)}",
                file=sys.stderr,
                flush=True,
            )
    return 0
