"""``skillog submit`` and ``skillog worker``: queue sessions, and drive them from any
number of worker processes on one database (docs/fleet.md)."""

from __future__ import annotations

import argparse
import getpass
import signal
import sys

import trio

from eventlog import visible
from eventlog._terminal import log_to_stderr

from .._catalog import open_log
from .._events import SessionStarted
from .._fleet import AgentFactory, Worker, describe, queue_session
from .._loop import Agent
from ..skills import Tier
from ._session import (
    DiscoveryCache,
    add_catalog_options,
    add_db,
    agent_for,
    session_policy,
)
from ._session import add_arguments as add_session_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    if parser.prog.split()[-1] == "submit":
        add_session_arguments(parser)  # the same as `skillog run`: the session to queue
        return
    add_db(parser)
    add_worker_arguments(parser)
    parser.add_argument(
        "--drain-s", type=float, default=30.0,
        help="on SIGTERM, how long in-flight sessions may take to finish before they are "
        "handed back (default: 30)",
    )  # fmt: skip
    parser.add_argument("--once", action="store_true", help="exit when the queue is empty")
    parser.add_argument("--name", default="", help="worker name in leases (default: host:pid:id)")


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """What a worker drives sessions with (``skillog worker`` and ``skillog serve``)."""
    parser.add_argument(
        "--skills", action="append", default=[], metavar="DIR",
        help="a skill directory or a folder of skills (repeatable), as for `skillog run`",
    )  # fmt: skip
    parser.add_argument(
        "--tier", default="user", choices=[t.value for t in Tier],
        help="trust tier of --skills directories (default: user)",
    )  # fmt: skip
    parser.add_argument("--project", default=".", help="project directory for .agents/skills")
    add_catalog_options(parser)
    parser.add_argument("--concurrency", type=int, default=4, help="sessions at once (4)")
    parser.add_argument(
        "--lease-ms", type=int, default=15_000,
        help="how long a claim lasts without renewal; another worker may take a session over "
        "this long after its worker died (default: 15000)",
    )  # fmt: skip
    parser.add_argument("--poll-ms", type=int, default=500, help="queue poll interval (500)")


def run(args: argparse.Namespace) -> int:
    return trio.run(_submit if args.command == "submit" else _work, args)


async def _submit(args: argparse.Namespace) -> int:
    """Queue one session per task (recorded as started, with its task); print the ids."""
    agent = agent_for(args, model_spec=args.model, policy=session_policy(args))
    submitter = f"cli:{getpass.getuser()}"
    try:
        async with open_log(args.db) as store:
            for task in args.tasks:
                session_id = await queue_session(
                    store, agent, task, submitter=submitter, policy=args.policy_profile or ""
                )
                print(visible(session_id))
    finally:
        agent.close()
    return 0


def agent_factory(args: argparse.Namespace, skills: DiscoveryCache | None = None) -> AgentFactory:
    """What a worker drives a session with: the model, limits and policy the session
    recorded, the skills of ``args`` (``--skills``, ``--tier``, ``--project``), indexed
    once and again only when they change (``skills``, shared with the service), no
    approver. (A worker only continues sessions, so it takes no policy options.)"""
    skills = skills if skills is not None else DiscoveryCache(args)

    def make_agent(started: SessionStarted) -> Agent:
        session_args = argparse.Namespace(
            **{
                **vars(args),
                "approve": False,
                "deny": False,
                "max_turns": started.max_turns,
                "file_access": started.file_access,
            }
        )
        return agent_for(
            session_args, model_spec=f"{started.provider}:{started.model}", skills=skills
        )

    return make_agent


async def _work(args: argparse.Namespace) -> int:
    log_to_stderr()
    make_agent = agent_factory(args)
    stop = trio.Event()
    async with (
        open_log(args.db) as store,
        trio.open_nursery() as nursery,
    ):
        worker = Worker(
            store,
            make_agent,
            name=args.name,
            concurrency=args.concurrency,
            lease_ms=args.lease_ms,
            poll_ms=args.poll_ms,
        )
        nursery.start_soon(_stop_on_signals, stop, worker.name)
        print(visible(f"worker {worker.name} on {args.db}"), file=sys.stderr, flush=True)
        await worker.run(stop, drain_s=args.drain_s, once=args.once)
        nursery.cancel_scope.cancel()
    print(visible(f"worker {worker.name}: {describe(worker.finished)}"))
    return 0


async def _stop_on_signals(stop: trio.Event, name: str) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            print(
                f"worker {visible(name)}: {signal.Signals(signum).name}: no new claims; finishing "
                "or handing back in-flight sessions",
                file=sys.stderr,
                flush=True,
            )
            stop.set()
