"""Run the service: Hypercorn's trio worker serving the app, beside the in-process
fleet workers, all in one nursery over one store."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from eventlog import SkillogError

from .._fleet import Worker
from .._previews import fan_out, preview_reader, preview_writer
from ._app import create_app
from ._context import ServiceContext
from ._notify import Notifier

log = logging.getLogger("skillog.service")


def is_loopback(bind: str) -> bool:
    host = bind.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def hypercorn_config(bind: str) -> Config:
    config = Config()
    config.bind = [bind]
    config.accesslog = None
    config.loglevel = "WARNING"  # not its "Running on ...": `skillog serve` says where it is
    config.include_server_header = False
    config.graceful_timeout = 3.0  # live event streams never end by themselves
    config.keep_alive_timeout = 30.0
    config.backlog = 1024  # hundreds of followers may (re)connect at once
    return config


async def serve(
    ctx: ServiceContext,
    bind: str,
    *,
    stop: trio.Event,
    workers: Sequence[Worker] = (),
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``ctx`` on ``bind`` (``HOST:PORT``; port 0 picks one) and run ``workers``
    until ``stop`` is set; ``task_status.started`` gets the bound URLs. The workers then
    drain as ``skillog worker`` does on SIGTERM. The workers' streamed answers are
    previewed to this server's followers and to other processes' (the side file on
    SQLite, NOTIFY on PostgreSQL); other processes' previews are read from there."""
    app = create_app(ctx)
    app.state.workers = workers  # a cancel stops this server's own driver of a session
    writer = preview_writer(ctx.store)
    for worker in workers:
        if worker.previews is None:
            local = ctx.previews.publish
            worker.previews = local if writer is None else fan_out(local, writer.publish)
    config = hypercorn_config(bind)

    async def http(task_status: trio.TaskStatus[list[str]]) -> None:
        await hypercorn_serve(  # Starlette is an ASGI app; hypercorn types it narrower
            app,  # type: ignore[arg-type]
            config,
            shutdown_trigger=stop.wait,
            task_status=task_status,
        )

    async def tail(task_status: trio.TaskStatus[None]) -> None:
        try:
            await ctx.tail.run(task_status=task_status)
        except SkillogError as e:  # live streams fall back to polling once a second
            log.error("skillog serve: stopped following the log: %s", e)

    async def notify(task_status: trio.TaskStatus[None]) -> None:
        assert ctx.webhook is not None
        try:
            await Notifier(ctx.store, ctx.webhook).run(task_status=task_status)
        except SkillogError as e:
            log.error("skillog serve: stopped notifying %s: %s", ctx.webhook.url, e)

    async with trio.open_nursery() as outer:
        await outer.start(tail)
        if not workers:  # the commits come from other processes: look for them often
            outer.start_soon(ctx.tail.poll)
        if writer is not None:
            await outer.start(writer.run)
        reader = preview_reader(ctx.store, ctx.previews, skip=writer)
        if reader is not None:
            await outer.start(reader.run)
        if ctx.webhook is not None:
            await outer.start(notify)
        async with trio.open_nursery() as nursery:
            for worker in workers:
                nursery.start_soon(worker.run, stop)
            task_status.started(await nursery.start(http))
        outer.cancel_scope.cancel()  # the tail and the notifier: nobody is served now
