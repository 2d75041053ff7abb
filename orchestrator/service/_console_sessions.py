"""The console's logins: server-side sessions, so the cookie is never a token.

``POST /api/login`` checks a token and opens a console session: a random id (256 bits)
goes into the cookie; the server keeps only its sha256, with the token's digest (not
the token), when it was opened and when it was last used. A console session ends on
logout, after ``idle_s`` without a request, ``absolute_s`` after the login whatever
happens, and as soon as its token is removed from the configuration (every request
looks the token's digest up in the book again). The sessions live in the server's
memory: a restart logs every console out (people log in again; nothing else is lost),
and several servers behind one balancer need it to keep a browser on one of them.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

import trio

IDLE_S = 30 * 60.0
ABSOLUTE_S = 12 * 3600.0
MAX_SESSIONS = 10_000  # beyond: the least recently used is forgotten


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class _Login:
    token_sha256: str
    opened: float
    used: float


@dataclass
class ConsoleSessions:
    """Open console sessions by the sha256 of their id (see the module docstring)."""

    idle_s: float = IDLE_S
    absolute_s: float = ABSOLUTE_S
    _open: dict[str, _Login] = field(default_factory=dict)

    def open(self, token_sha256: str) -> str:
        """A new session for the token with this digest; its id, for the cookie only."""
        session_id = secrets.token_urlsafe(32)
        now = trio.current_time()
        if len(self._open) >= MAX_SESSIONS:
            oldest = min(self._open, key=lambda k: self._open[k].used)
            del self._open[oldest]
        self._open[_digest(session_id)] = _Login(token_sha256, now, now)
        return session_id

    def token_of(self, session_id: str) -> str | None:
        """The token digest of a live session (and it counts as used now), else None
        (unknown, logged out or expired: an expired one is forgotten)."""
        key = _digest(session_id)
        login = self._open.get(key)
        if login is None:
            return None
        now = trio.current_time()
        if now - login.used > self.idle_s or now - login.opened > self.absolute_s:
            del self._open[key]
            return None
        login.used = now
        return login.token_sha256

    def close(self, session_id: str) -> bool:
        """Log out: the id answers nothing from now on."""
        return self._open.pop(_digest(session_id), None) is not None

    def close_token(self, token_sha256: str) -> int:
        """End every session of a token (revoked); how many there were."""
        keys = [k for k, v in self._open.items() if v.token_sha256 == token_sha256]
        for key in keys:
            del self._open[key]
        return len(keys)

    def __len__(self) -> int:
        return len(self._open)
