"""Webhook notifications: when an approval is requested, or a session ends or fails,
the service POSTs it to the operator's URL, so nobody has to watch the page.

The notifier follows the log (one ``store.follow`` per server, from the log's end when
the server starts) and posts each ``approval.requested`` and ``session.ended`` as JSON:
``{"kind": "approval.requested" | "session.ended" | "session.failed", "session", "seq",
"hash", "recorded_at", "type", "body"}`` (``body`` the event as recorded). Headers:
``X-Skillog-Event`` the kind; ``X-Skillog-Delivery`` the event's hash (the same on
every retry and from every server: a receiver drops what it has seen);
``X-Skillog-Signature: sha256=HEX``, the HMAC-SHA256 of the body with the operator's
secret (compare it in constant time). A refused or failed delivery (network error,
timeout, 429 or 5xx) is retried with exponential backoff; another 4xx is final. Each
outcome is logged on ``skillog.webhook`` (delivered after N attempts, or failed and
why). Nothing here writes to the log: a notification is about the log, not in it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass

import msgspec
import trio

from eventlog import Event, EventStore, SkillogError, closing
from eventlog._terminal import visible

log = logging.getLogger("skillog.webhook")


class WebhookError(SkillogError):
    """A webhook setting that is not one."""


KINDS = ("approval.requested", "session.ended")
MAX_IN_FLIGHT = 8


@dataclass(frozen=True)
class Webhook:
    """Where and how to notify: ``url``, the HMAC ``secret``, ``attempts`` in all, the
    first retry after ``backoff_s`` (doubling), each request bounded by ``timeout_s``."""

    url: str
    secret: bytes
    attempts: int = 5
    backoff_s: float = 1.0
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise WebhookError(f"webhook URL {self.url!r}: give an http:// or https:// URL")


class _Payload(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    session: str
    seq: int
    hash: str
    recorded_at: int
    type: str
    body: msgspec.Raw


class _Ended(msgspec.Struct, frozen=True):
    reason: str = ""


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-Skillog-Signature`` value of ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def payload(event: Event) -> tuple[str, bytes] | None:
    """The notification of ``event`` (its kind and JSON body), or None when it is not
    one the webhook announces."""
    tag = event.type.split("@")[0]
    if tag not in KINDS:
        return None
    kind = tag
    if tag == "session.ended":
        try:
            reason = msgspec.json.decode(event.body, type=_Ended).reason
        except msgspec.DecodeError:
            reason = ""
        kind = "session.failed" if reason == "error" else tag
    out = _Payload(
        kind=kind,
        session=str(event.stream),
        seq=event.seq,
        hash=event.hash,
        recorded_at=event.recorded_at,
        type=event.type,
        body=msgspec.Raw(event.body),
    )
    return kind, msgspec.json.encode(out)


def _post(hook: Webhook, kind: str, delivery: str, body: bytes) -> int:
    """One POST (blocking; run in a thread): the status, or raises OSError."""
    request = urllib.request.Request(
        hook.url,
        data=body,
        method="POST",
        headers={
            "content-type": "application/json",
            "user-agent": "skillog-webhook",
            "x-skillog-event": kind,
            "x-skillog-delivery": delivery,
            "x-skillog-signature": signature(hook.secret, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=hook.timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


async def deliver(hook: Webhook, kind: str, delivery: str, body: bytes) -> tuple[bool, int, str]:
    """Deliver one notification with retries: (delivered, attempts, last outcome)."""
    outcome = ""
    for attempt in range(1, hook.attempts + 1):
        try:
            status = await trio.to_thread.run_sync(_post, hook, kind, delivery, body)
        except (OSError, ValueError) as e:
            outcome = f"error: {e}"
        else:
            outcome = f"HTTP {status}"
            if 200 <= status < 300:
                return True, attempt, outcome
            if status < 500 and status != 429:
                return False, attempt, outcome  # the receiver refuses it: final
        if attempt < hook.attempts:
            await trio.sleep(hook.backoff_s * 2 ** (attempt - 1))
    return False, hook.attempts, outcome


class Notifier:
    """Follows the log and notifies ``hook`` (see the module docstring)."""

    def __init__(self, store: EventStore, hook: Webhook) -> None:
        self.store, self.hook = store, hook
        self.outcomes: list[tuple[str, bool, int, str]] = []  # (delivery, ok, attempts, why)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        last = getattr(self.store, "last_position", None)
        start = int(await last()) + 1 if last is not None else 0
        in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        async with trio.open_nursery() as nursery:
            task_status.started()
            async with closing(self.store.follow(from_position=start)) as events:
                async for event in events:
                    found = payload(event)
                    if found is not None:
                        await in_flight.acquire()  # a slow receiver slows this, not the log
                        nursery.start_soon(self._one, event, *found, in_flight)

    async def _one(self, event: Event, kind: str, body: bytes, in_flight: trio.Semaphore) -> None:
        try:
            ok, attempts, why = await deliver(self.hook, kind, event.hash, body)
        finally:
            in_flight.release()
        self.outcomes.append((event.hash, ok, attempts, why))
        del self.outcomes[:-1000]
        where = f"{kind} of session {visible(str(event.stream))} (seq {event.seq})"
        if ok:
            log.info("webhook: %s delivered after %d attempt(s) (%s)", where, attempts, why)
        else:
            log.error("webhook: %s NOT delivered after %d attempt(s): %s", where, attempts, why)
