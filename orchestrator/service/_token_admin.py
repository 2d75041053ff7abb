"""Tokens, administered from the API and the console (``admin``): list them (names and
roles; no token is stored to show), create one (shown once, in the answer), revoke a
name's. The configuration file stays the one place tokens live: these write it as
``skillog serve tokens`` does, and revoking also ends the name's console sessions."""

from __future__ import annotations

from html import escape

import trio
from starlette.requests import Request
from starlette.responses import Response

from ..skills import add_service_token, load_service_config, remove_service_tokens
from ._auth import new_token
from ._console import page
from ._errors import ApiError
from ._routes import body, context, json, require
from ._schemas import TokenCreated, TokenList, TokenOut, TokenRequest, TokenRevoked


async def list_tokens(request: Request) -> Response:
    require(request, "admin")
    config = await trio.to_thread.run_sync(load_service_config, context(request).tokens.path)
    listed = [TokenOut(name=t.name, roles=list(t.roles)) for t in config.tokens]
    return json(TokenList(tokens=listed))


async def create_token(request: Request) -> Response:
    require(request, "admin")
    req = await body(request, TokenRequest)
    path = context(request).tokens.path
    config = await trio.to_thread.run_sync(load_service_config, path)
    if any(t.name == req.name for t in config.tokens):
        raise ApiError(409, f"a token named {req.name!r} exists; revoke it first", "$.name")
    token, entry = new_token(req.name, tuple(dict.fromkeys(req.roles)))
    await trio.to_thread.run_sync(add_service_token, path, entry)
    context(request).tokens.invalidate()
    return json(TokenCreated(name=entry.name, roles=list(entry.roles), token=token), 201)


async def revoke_token(request: Request) -> Response:
    require(request, "admin")
    name = request.path_params["name"]
    ctx = context(request)
    config = await trio.to_thread.run_sync(load_service_config, ctx.tokens.path)
    digests = [t.sha256 for t in config.tokens if t.name == name]
    if not digests:
        raise ApiError(404, f"no token named {name!r}", "name")
    removed = await trio.to_thread.run_sync(remove_service_tokens, ctx.tokens.path, name)
    ctx.tokens.invalidate()
    ended = sum(ctx.console.close_token(d) for d in digests)
    return json(TokenRevoked(name=name, revoked=removed, console_sessions_ended=ended))


async def tokens_page(request: Request) -> Response:
    who = require(request, "admin")
    config = await trio.to_thread.run_sync(load_service_config, context(request).tokens.path)
    rows = "".join(
        f'<tr data-name="{escape(t.name)}"><td>{escape(t.name)}</td>'
        f"<td>{escape(', '.join(t.roles))}</td>"
        '<td><button class="revoke" type="button">Revoke</button></td></tr>'
        for t in config.tokens
    )
    roles = "".join(
        f'<label><input type="checkbox" class="role" value="{r}"'
        f"{' checked' if r == 'viewer' else ''}> {r}</label> "
        for r in ("viewer", "approver", "submitter", "admin")
    )
    content = (
        "<h2>Tokens</h2><table id=tokens><thead><tr><th>name</th><th>roles</th><th></th></tr>"
        f"</thead><tbody>{rows}</tbody></table>"
        '<form id="new-token"><h2>New token</h2><label>Name <input id="token-name" '
        f'required maxlength="64" pattern="[A-Za-z0-9_.@-]+"></label> {roles}'
        '<button type="submit">Create</button><p id="message" class="message"></p>'
        '<p>Shown once: <code id="new-token-value"></code></p></form>'
    )
    return page("tokens", content, who)
