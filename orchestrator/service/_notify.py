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
why) and recorded in the log, in a stream of its own per delivery (``webhook/<delivery
id>``, never a session's: a session's hashes do not depend on a receiver): each attempt
written ahead as ``webhook.sending``, its outcome as ``webhook.sent`` (status, error,
``delivered``/``retrying``/``failed``), checked by the webhook grammar in ``log
verify``. The first attempt's record claims the delivery, so with several servers on
one log, one of them notifies each event.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec
import trio

from eventlog import ConcurrencyError, Event, EventStore, SkillogError, closing
from eventlog._terminal import visible

from .._events import CODEC, WebhookSending, WebhookSent
from .._fleet import driver_name
from .._streams import webhook_stream

log = logging.getLogger("skillog.webhook")


class WebhookError(SkillogError):
    """A webhook setting that is not one."""


KINDS = ("approval.requested", "session.ended")
Outcome = Literal["delivered", "retrying", "failed"]
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


async def _attempt(hook: Webhook, kind: str, delivery: str, body: bytes) -> tuple[int, str | None]:
    """One POST: (HTTP status, None) or (0, the error)."""
    try:
        return await trio.to_thread.run_sync(_post, hook, kind, delivery, body), None
    except (OSError, ValueError) as e:
        return 0, str(e)


def _outcome(status: int, attempt: int, attempts: int) -> Outcome:
    if 200 <= status < 300:
        return "delivered"
    final = attempt >= attempts or (status != 0 and status < 500 and status != 429)
    return "failed" if final else "retrying"  # another 4xx: the receiver refuses it


class DeliveryTakenError(SkillogError):
    """Another server records (and makes) this delivery: this one leaves it alone."""


async def deliver(
    hook: Webhook,
    kind: str,
    event: Event,
    body: bytes,
    *,
    store: EventStore,
    sender: str,
    clock: Callable[[], int] = time.time_ns,
) -> tuple[bool, int, str]:
    """Deliver the notification of ``event`` with retries, each attempt written ahead
    (``webhook.sending``) and its outcome after (``webhook.sent``) in the stream
    ``webhook/<event hash>``: (delivered, attempts, last outcome). The first attempt's
    record claims the delivery: when another server's is there first,
    :class:`DeliveryTakenError` (nothing was sent)."""
    delivery, stream = event.hash, webhook_stream(event.hash)
    seq, why = 0, ""
    for attempt in range(1, hook.attempts + 1):
        sending = WebhookSending(
            delivery=delivery,
            attempt=attempt,
            kind=kind,
            session=str(event.stream),
            seq=event.seq,
            sender=sender,
        )
        try:
            await store.append(
                stream, [CODEC.encode(sending, recorded_at=clock())], expected_seq=seq
            )
        except ConcurrencyError as e:
            if attempt == 1:
                raise DeliveryTakenError(f"delivery {delivery} is another server's") from e
            raise
        status, error = await _attempt(hook, kind, delivery, body)
        why = f"HTTP {status}" if error is None else f"error: {error}"
        outcome = _outcome(status, attempt, hook.attempts)
        sent = WebhookSent(
            delivery=delivery,
            attempt=attempt,
            outcome=outcome,
            status=status,
            error=error,
        )
        with trio.CancelScope(shield=True):  # the outcome of what was sent is not lost
            await store.append(
                stream, [CODEC.encode(sent, recorded_at=clock())], expected_seq=seq + 1
            )
        seq += 2
        if outcome != "retrying":
            return outcome == "delivered", attempt, why
        await trio.sleep(hook.backoff_s * 2 ** (attempt - 1))
    return False, hook.attempts, why  # pragma: no cover - the last attempt is final


class Notifier:
    """Follows the log and notifies ``hook`` (see the module docstring)."""

    def __init__(self, store: EventStore, hook: Webhook, sender: str = "") -> None:
        self.store, self.hook = store, hook
        self.sender = sender or driver_name("serve")
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
            ok, attempts, why = await deliver(
                self.hook, kind, event, body, store=self.store, sender=self.sender
            )
        except DeliveryTakenError:
            return  # another server of this log notifies it
        finally:
            in_flight.release()
        self.outcomes.append((event.hash, ok, attempts, why))
        del self.outcomes[:-1000]
        where = f"{kind} of session {visible(str(event.stream))} (seq {event.seq})"
        if ok:
            log.info("webhook: %s delivered after %d attempt(s) (%s)", where, attempts, why)
        else:
            log.error("webhook: %s NOT delivered after %d attempt(s): %s", where, attempts, why)
