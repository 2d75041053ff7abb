"""``skillog serve``: the HTTP API, live events and the web console over one log, with
in-process workers (docs/service.md)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

import trio

from eventlog import EventStore, SkillogError, describe_db
from eventlog._terminal import log_to_stderr

from .._catalog import open_log
from .._events import PolicyConfig
from .._fleet import Worker
from .._loop import Agent
from ..skills import config_path
from ._demo import DEMO
from ._fleet import add_worker_arguments, agent_factory
from ._session import (
    DiscoveryCache,
    add_db,
    add_policy_arguments,
    agent_for,
    session_policy,
    stop_on_signals,
    turn_bound,
)

if TYPE_CHECKING:
    from ..service import ServiceContext

WEBHOOK_SECRET = "SKILLOG_WEBHOOK_SECRET"
DEMO_MODEL = f"scripted:{DEMO / 'turns.yaml'}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    parser.add_argument(
        "--bind", default="127.0.0.1:8765",
        help="HOST:PORT to listen on (default: 127.0.0.1:8765, loopback only)",
    )  # fmt: skip
    parser.add_argument(
        "--workers", type=int, default=1,
        help="in-process workers driving sessions (default: 1); 0 with PostgreSQL: a pure "
        "front end for `skillog worker` processes",
    )  # fmt: skip
    parser.add_argument(
        "--model", action="append", default=[], metavar="SPEC",
        help="a model submissions may use (repeatable; the first is the default), as for "
        "`skillog run`; without one, the bundled demo script and skills",
    )  # fmt: skip
    add_worker_arguments(parser)
    parser.add_argument(
        "--max-turns", type=turn_bound, default=50, help="turn bound of submissions"
    )
    add_policy_arguments(parser)
    parser.add_argument(
        "--otel-endpoint", metavar="URL",
        help="the OTLP/HTTP backend of POST /api/sessions/ID/otel-export (e.g. "
        "http://localhost:4318); without it the trigger answers 409",
    )  # fmt: skip
    parser.add_argument(
        "--trusted-proxy", action="append", default=[], metavar="ADDRESS",
        help="a proxy's address or network (repeatable): its X-Forwarded-Proto/-For/-Host "
        "headers are believed; nobody else's are",
    )  # fmt: skip
    parser.add_argument(
        "--public-origin", metavar="URL",
        help="the origin browsers use (e.g. https://skillog.example.com): requests must be "
        "addressed to its host, console writes must come from it, and the console's cookie "
        "is Secure when it is https",
    )  # fmt: skip
    parser.add_argument(
        "--max-streams", type=int, nargs=2, default=[400, 400], metavar=("PER_TOKEN", "PER_CLIENT"),
        help="live event streams one token and one client address may hold at once "
        "(default: 400 400); past them: 429 with Retry-After",
    )  # fmt: skip
    parser.add_argument(
        "--webhook", metavar="URL",
        help="POST each approval request and each session's end or failure to URL, signed "
        "with HMAC-SHA256 of the secret in $SKILLOG_WEBHOOK_SECRET (docs/service.md)",
    )  # fmt: skip
    parser.add_argument(
        "--webhook-timeout", type=float, default=5.0, metavar="SECONDS",
        help="how long one webhook request may take (default: 5); an attempt another "
        "server left open for twice that and a second is taken over",
    )  # fmt: skip
    parser.add_argument(
        "--add-token", metavar="NAME",
        help="create a token named NAME with --roles, print it once, store its sha256 in the "
        "configuration file, and exit (remove its entry from the file to revoke it)",
    )  # fmt: skip
    parser.add_argument(
        "--roles", default="viewer",
        help="comma-separated roles of --add-token: viewer, approver, submitter, admin",
    )  # fmt: skip
    actions = parser.add_subparsers(dest="serve_action", metavar="ACTION")
    tokens = actions.add_parser(
        "tokens", help="list, add or revoke the service's tokens (in the configuration file)",
        description="The service's bearer tokens, kept as their sha256 in the configuration "
        "file; a running server sees a change within a second.",
    )  # fmt: skip
    what = tokens.add_subparsers(dest="tokens_action", metavar="ACTION", required=True)
    what.add_parser("list", help="the tokens' names and roles (never a token: none is stored)")
    add = what.add_parser("add", help="create a token, print it once, store its sha256")
    add.add_argument("name", help="the token's name (recorded as who decided an approval)")
    add.add_argument(
        "--roles", default="viewer",
        help="comma-separated roles: viewer, approver, submitter, admin (default: viewer)",
    )  # fmt: skip
    revoke = what.add_parser(
        "revoke", help="remove the token(s) of a name: refused from the next request on"
    )
    revoke.add_argument("name")


def use_demo_default(args: argparse.Namespace) -> None:
    """Without ``--model``: the bundled demo script, with the demo skills when no
    ``--skills`` are given (at ``--tier``, user by default: its script needs approval)."""
    if not args.model:
        args.model = [DEMO_MODEL]
        args.skills = args.skills or [str(DEMO / "skills")]


def run(args: argparse.Namespace) -> int:
    try:
        from ..service import ensure_token
    except ImportError as e:
        raise SkillogError(
            f"skillog serve needs the service extra ({e}): pip install 'skillog[service]'"
        ) from e

    if args.serve_action == "tokens":
        return _tokens(args)
    if args.add_token is not None:
        return _add_token(args.add_token, args.roles)
    if args.workers < 0:
        print("skillog serve: --workers must be 0 or more", file=sys.stderr)
        return 2
    use_demo_default(args)
    path = config_path()
    token = ensure_token(path)
    if token is not None:
        print(
            f"created an admin token (its sha256 is stored in {path}; the token is shown "
            f"only now):\n\n    {token}\n",
            flush=True,
        )
    return trio.run(_serve, args)


def _tokens(args: argparse.Namespace) -> int:
    from eventlog._terminal import visible

    from ..skills import load_service_config, remove_service_tokens

    path = config_path()
    if args.tokens_action == "add":
        if any(t.name == args.name for t in load_service_config(path).tokens):
            print(
                f"skillog serve tokens: a token named {visible(args.name)!r} exists; revoke it "
                "first or choose another name",
                file=sys.stderr,
            )
            return 2
        return _add_token(args.name, args.roles)
    if args.tokens_action == "revoke":
        removed = remove_service_tokens(path, args.name)
        if not removed:
            print(f"skillog serve tokens: no token named {visible(args.name)!r}", file=sys.stderr)
            return 1
        print(f"revoked {visible(args.name)} ({removed} token(s)); refused from the next request")
        return 0
    for token in load_service_config(path).tokens:
        print(f"{visible(token.name)}\t{','.join(token.roles)}\tsha256:{token.sha256[:12]}")
    return 0


def _add_token(name: str, roles_text: str) -> int:
    from ..service import ROLES, new_token
    from ..skills import add_service_token

    roles = tuple(r.strip() for r in roles_text.split(",") if r.strip())
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        print(f"skillog serve: unknown role(s) {unknown}; use {', '.join(ROLES)}", file=sys.stderr)
        return 2
    token, entry = new_token(name, roles)  # type: ignore[arg-type]
    add_service_token(config_path(), entry)
    print(f"token {name} ({', '.join(roles)}), shown only now:\n\n    {token}\n")
    return 0


def policy_presets(args: argparse.Namespace, policy: PolicyConfig) -> dict[str, PolicyConfig]:
    """The policy presets submissions may name, the default first: ``default`` is
    ``policy``, what serve itself resolved (configuration, ``--policy-profile``,
    ``--policy``); then each profile of the configuration file by its name (with the
    ``--policy`` settings over it, as for ``skillog run --policy-profile NAME``)."""
    from .._policy_config import load_policy, policy_profiles
    from ..service import DEFAULT_POLICY

    presets = {DEFAULT_POLICY: policy}
    for name in policy_profiles(config_path()):
        presets.setdefault(name, load_policy(config_path(), profile=name, sets=args.policy))
    return presets


def build(store: EventStore, args: argparse.Namespace) -> tuple[ServiceContext, list[Worker]]:
    """The service context and in-process workers ``args`` (of ``skillog serve``) ask
    for, over ``store``."""
    from ..service import Proxying, ServiceContext, StreamLimits, TokenBook, Webhook

    policy = session_policy(args)  # read once: a bad policy stops serve at start
    proxying = Proxying.from_settings(args.trusted_proxy, args.public_origin)
    if min(args.max_streams) < 1:
        raise SkillogError("--max-streams takes two numbers of 1 or more")

    # Indexed once, again only when the sources change; a skill whose python: environment
    # is not built is offered when serve's policy installs it on approval.
    skills = DiscoveryCache(args, lazy_install=policy.lazy_install == "ask")

    def make_agent(spec: str) -> Agent:
        session_args = argparse.Namespace(
            **{**vars(args), "approve": False, "deny": False, "file_access": False}
        )
        return agent_for(session_args, model_spec=spec, policy=policy, skills=skills)

    ctx = ServiceContext(
        store=store,
        tokens=TokenBook(config_path()),
        models=tuple(args.model),
        make_agent=make_agent,
        policies=policy_presets(args, policy),
        otel_endpoint=args.otel_endpoint,
        proxying=proxying,
        stream_limits=StreamLimits(*args.max_streams),
        webhook=None
        if args.webhook is None
        else Webhook(args.webhook, _webhook_secret(), timeout_s=args.webhook_timeout),
    )
    workers = [
        Worker(
            store,
            agent_factory(args, skills),
            name=f"serve-{i}" if args.workers > 1 else "",
            concurrency=args.concurrency,
            lease_ms=args.lease_ms,
            poll_ms=args.poll_ms,
        )
        for i in range(args.workers)
    ]
    return ctx, workers


def _webhook_secret() -> bytes:
    secret = os.environ.get(WEBHOOK_SECRET, "")
    if len(secret) < 16:
        raise SkillogError(
            f"--webhook: set {WEBHOOK_SECRET} to a secret of 16 characters or "
            "more (the receiver checks X-Skillog-Signature with it)"
        )
    return secret.encode()


async def _serve(args: argparse.Namespace) -> int:
    from ..service import is_loopback, serve

    log_to_stderr()
    if not is_loopback(args.bind):
        print(
            f"skillog serve: listening on {args.bind}, beyond this machine: put TLS in front",
            file=sys.stderr,
        )
    stop = trio.Event()
    async with open_log(args.db) as store:
        ctx, workers = build(store, args)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signals, stop, "skillog serve", "shutting down")
            urls = await nursery.start(lambda task_status: serve(
                ctx, args.bind, stop=stop, workers=workers, task_status=task_status
            ))  # fmt: skip
            print(
                f"skillog serve: {', '.join(urls)} on {describe_db(args.db)}; "
                f"{len(workers)} worker(s); console at {urls[0]}/console",
                file=sys.stderr,
                flush=True,
            )
            await stop.wait()
    return 0
