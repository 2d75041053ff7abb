"""``skillog submit`` and ``skillog worker``: queue sessions, and drive them from any
number of worker processes on one database (docs/fleet.md)."""

from __future__ import annotations

import argparse
import getpass
import signal
import sys
from typing import TextIO

import trio

from eventlog import EventStore, SkillogError, closing, visible
from eventlog._terminal import log_to_stderr

from .._catalog import open_log
from .._events import (
    CODEC,
    ModelResponded,
    SessionEnded,
    SessionStarted,
    SessionSuspended,
    ToolCompleted,
    ToolInterrupted,
)
from .._fleet import AgentFactory, Worker, describe, queue_session
from .._loop import Agent
from .._previews import PreviewBoard, preview_reader, preview_writer
from ..skills import Tier
from ._session import (
    DiscoveryCache,
    add_catalog_options,
    add_db,
    agent_for,
    progress_line,
    session_policy,
)
from ._session import _report as report
from ._session import add_arguments as add_session_arguments

FOLLOW_POLL_S = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    if parser.prog.split()[-1] == "submit":
        add_session_arguments(parser)  # the same as `skillog run`: the session to queue
        parser.add_argument(
            "--follow", action="store_true",
            help="with one task: stay, print what the workers record (and the answer's text "
            "as it streams) to stderr until the session ends or waits for an approval, then "
            "its transcript as `skillog run` does",
        )  # fmt: skip
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
    if args.follow and len(args.tasks) != 1:
        raise SkillogError("--follow follows one session: give one task")
    agent = agent_for(args, model_spec=args.model, policy=session_policy(args))
    submitter = f"cli:{getpass.getuser()}"
    try:
        async with open_log(args.db) as store:
            for task in args.tasks:
                session_id = await queue_session(
                    store, agent, task, submitter=submitter, policy=args.policy_profile or ""
                )
                print(visible(session_id), flush=True)
            if args.follow:
                await follow_session(store, session_id, sys.stderr)
                return await report(store, session_id)
    finally:
        agent.close()
    return 0


async def follow_session(store: EventStore, session_id: str, out: TextIO) -> None:
    """Print to ``out`` what is recorded of ``session_id`` from now on, one line per
    event, the text of its answers as they stream and its MCP calls' progress, a line
    each (previews from the workers, through the log's side file or NOTIFY; never
    recorded), until the session ends or suspends. Previews are
    lossy: when a ``model.responded`` lands, the rest of its recorded text is printed
    if what streamed was the start of it. Everything printed goes through ``visible``."""
    board = PreviewBoard()
    reader = preview_reader(store, board)
    next_seq = 0
    shown, answered = "", 0  # the text previewed of the answer being streamed
    finished: set[str] = set()  # calls whose outcome is recorded: their progress is over
    with board.following(session_id) as previews:
        async with trio.open_nursery() as nursery:
            if reader is not None:
                await nursery.start(reader.run)
            while True:
                while True:  # the previews that came, then the events
                    try:
                        preview = previews.receive_nowait()
                    except trio.WouldBlock:
                        break
                    if preview.kind == "text" and preview.turn > answered:
                        out.write(visible(preview.text, lines=True))
                        shown += preview.text
                    elif preview.kind == "progress" and preview.call_id not in finished:
                        line = progress_line(
                            preview.name, preview.progress or "", preview.total, preview.text
                        )
                        out.write(("\n" if shown else "") + line + "\n")
                async with closing(store.read(session_id, from_seq=next_seq)) as events:
                    async for event in events:
                        next_seq = event.seq + 1
                        body = CODEC.decode(event)
                        if isinstance(body, ToolCompleted | ToolInterrupted):
                            finished.add(body.call_id)
                        if isinstance(body, ModelResponded):
                            answered = body.turn
                            said = body.response.text
                            if shown and said.startswith(shown):
                                out.write(visible(said[len(shown) :], lines=True))
                        if shown:
                            out.write("\n")
                            shown = ""
                        out.write(visible(f"· {body.event_type}") + "\n")
                        if isinstance(body, SessionEnded | SessionSuspended):
                            out.flush()
                            nursery.cancel_scope.cancel()
                            return
                out.flush()
                await trio.sleep(FOLLOW_POLL_S)


def agent_factory(args: argparse.Namespace, skills: DiscoveryCache | None = None) -> AgentFactory:
    """What a worker drives a session with: the model, limits and policy the session
    recorded, the skills of ``args`` (``--skills``, ``--tier``, ``--project``), indexed
    once and again only when they change (``skills``, shared with the service), no
    approver. (A worker only continues sessions, so it takes no policy options.) A
    session whose recorded policy installs ``python:`` environments on approval
    (``lazy_install: ask``) is offered the skills still missing one, as ``run`` and
    ``serve`` offer them."""
    plain = skills if skills is not None else DiscoveryCache(args)
    # serve's own cache already offers them when its policy installs: index once, not twice
    installing = plain if plain.lazy_install else DiscoveryCache(args, lazy_install=True)

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
        skills = installing if started.policy.lazy_install == "ask" else plain
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
        writer = preview_writer(store)  # previews cross to `skillog serve` and `--follow`
        worker = Worker(
            store,
            make_agent,
            name=args.name,
            concurrency=args.concurrency,
            lease_ms=args.lease_ms,
            poll_ms=args.poll_ms,
            previews=None if writer is None else writer.publish,
        )
        if writer is not None:
            await nursery.start(writer.run)
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
