"""Bearer tokens: who may call the service, and in which roles.

Tokens live in the ``service:`` section of the skillog configuration file, stored as
their sha256 only. The file is re-read when it changes, so removing a token takes
effect on the next request without a restart. Every role may read (``viewer``);
``approver`` may also decide approvals, ``submitter`` submit tasks, ``admin`` all.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass, field

import msgspec
import trio

from ..skills import (
    ConfigError,
    Role,
    ServiceConfig,
    ServiceToken,
    add_service_token,
    load_service_config,
)

log = logging.getLogger("skillog.service")

ROLES: tuple[Role, ...] = ("viewer", "approver", "submitter", "admin")
TOKEN_PREFIX = "skl_"
_RELOAD_NS = 1_000_000_000  # look at the file at most once a second


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token(name: str, roles: tuple[Role, ...]) -> tuple[str, ServiceToken]:
    """A fresh random token and the entry to store for it (its hash, never the token)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    raw = {"name": name, "sha256": token_digest(token), "roles": list(roles)}
    try:  # convert, not the constructor: it checks the name's and roles' constraints
        return token, msgspec.convert(raw, ServiceToken)
    except msgspec.ValidationError as e:
        raise ConfigError(
            f"token {name!r}: {e} (names: letters, digits, '.', '@', '-', '_')"
        ) from e


def ensure_token(path: str) -> str | None:
    """On a first run with no token configured, create an ``admin`` token, store its
    hash in ``path`` and return the token (to be shown once); else None."""
    if load_service_config(path).tokens:
        return None
    token, entry = new_token("admin", ("admin",))
    add_service_token(path, entry)
    return token


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: the token's name (recorded as ``decided_by``) and roles."""

    name: str
    roles: frozenset[str]

    def may(self, role: Role) -> bool:
        return role == "viewer" or "admin" in self.roles or role in self.roles


@dataclass
class TokenBook:
    """The configured tokens, re-read from ``path`` when the file changes."""

    path: str
    _tokens: tuple[ServiceToken, ...] = ()
    _stamp: tuple[int, int] | None = None
    _checked: int = field(default=-_RELOAD_NS)
    _reading: trio.Lock = field(default_factory=trio.Lock)

    async def lookup(self, token: str) -> Principal | None:
        return await self.lookup_digest(token_digest(token))

    async def lookup_digest(self, digest: str) -> Principal | None:
        """The principal of the token whose sha256 is ``digest``, if it is configured."""
        await self._refresh()
        found = None
        for entry in self._tokens:  # compare with every entry: no timing hint of which
            if hmac.compare_digest(entry.sha256, digest):
                found = entry
        return None if found is None else Principal(found.name, frozenset(found.roles))

    def invalidate(self) -> None:
        """Read the file again on the next lookup (this process just wrote it)."""
        self._checked = -_RELOAD_NS
        self._stamp = None

    async def _refresh(self) -> None:
        if trio.current_time() * 1e9 - self._checked < _RELOAD_NS:
            return  # looked less than a second ago: no lock (a trip through the scheduler)
        # One reader at a time: a request arriving while the file is read waits for it
        # (before the first read there is no token to accept it with).
        async with self._reading:
            now = trio.current_time() * 1e9
            if now - self._checked < _RELOAD_NS:
                return
            stamp = await trio.to_thread.run_sync(_stamp, self.path)
            if stamp != self._stamp:
                try:
                    config = await trio.to_thread.run_sync(load_service_config, self.path)
                except ConfigError as e:  # fail closed: no token is valid until it is fixed
                    log.error("skillog serve: every token refused until this is fixed: %s", e)
                    config = ServiceConfig()
                self._tokens, self._stamp = config.tokens, stamp
            self._checked = int(now)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size
