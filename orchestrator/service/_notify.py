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

A server that stops between an attempt's ``webhook.sending`` and its ``webhook.sent``
(SIGKILL, a crash) leaves the attempt open. Every server watches the open attempts of
others (those open when it starts, found from the streams' lengths, and those it sees
begin while it follows the log); one still open past :attr:`Webhook.stale_s` is taken
over: closed as ``retrying`` with its outcome unknown (``taken_over_by``, the reason in
``error``), then retried by this server with the same delivery id and body (the same
signature), so a receiver that did get the first request drops the second. Two servers
taking over the same attempt race on the stream's expected seq: one wins, and an old
sender that was only slow finds its outcome's seq taken and stops.
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
from .._streams import WEBHOOK_PREFIX, webhook_stream

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
        if not self.timeout_s > 0:
            raise WebhookError(f"webhook timeout {self.timeout_s!r}: give a positive number")

    @property
    def stale_s(self) -> float:
        """How long an attempt may stay open before another server takes it over: its
        sender waits at most ``timeout_s`` to connect and ``timeout_s`` for each read,
        then records the outcome; twice that and a second means the sender stopped."""
        return 2 * self.timeout_s + 1


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
    first_attempt: int = 1,
    seq: int = 0,
) -> tuple[bool, int, str]:
    """Deliver the notification of ``event`` with retries, each attempt written ahead
    (``webhook.sending``) and its outcome after (``webhook.sent``) in the stream
    ``webhook/<event hash>``: (delivered, attempts, last outcome). The first attempt's
    record claims the delivery: when another server's is there first,
    :class:`DeliveryTakenError` (nothing was sent); also when another server took an
    attempt of this one over (:func:`take_over`: from ``first_attempt`` at ``seq``, at
    least that one attempt)."""
    delivery, stream = event.hash, webhook_stream(event.hash)
    why = ""
    last = max(hook.attempts, first_attempt)
    for attempt in range(first_attempt, last + 1):
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
            if attempt == first_attempt:
                raise DeliveryTakenError(f"delivery {delivery} is another server's") from e
            raise
        status, error = await _attempt(hook, kind, delivery, body)
        why = f"HTTP {status}" if error is None else f"error: {error}"
        outcome = _outcome(status, attempt, last)
        sent = WebhookSent(
            delivery=delivery,
            attempt=attempt,
            outcome=outcome,
            status=status,
            error=error,
        )
        with trio.CancelScope(shield=True):  # the outcome of what was sent is not lost
            try:
                await store.append(
                    stream, [CODEC.encode(sent, recorded_at=clock())], expected_seq=seq + 1
                )
            except ConcurrencyError as e:  # we were too slow: another server took it over
                raise DeliveryTakenError(
                    f"attempt {attempt} of delivery {delivery} was taken over ({why})"
                ) from e
        seq += 2
        if outcome != "retrying":
            return outcome == "delivered", attempt, why
        await trio.sleep(hook.backoff_s * 2 ** (attempt - 1))
    return False, hook.attempts, why  # pragma: no cover - the last attempt is final


async def take_over(
    hook: Webhook,
    store: EventStore,
    open_attempt: Event,
    *,
    sender: str,
    clock: Callable[[], int] = time.time_ns,
) -> tuple[str, Event, bool, int, str] | None:
    """Close ``open_attempt`` (a ``webhook.sending`` another server left without an
    outcome) as unknown, and deliver again from the next attempt: (kind, the notified
    event, delivered, attempts, last outcome); None when it was closed meanwhile (by its
    sender or another server) or the notified event is no longer in the log."""
    sending = CODEC.decode(open_attempt)
    assert isinstance(sending, WebhookSending)
    notified = await _event(store, sending.session, sending.seq)
    found = None if notified is None else payload(notified)
    if notified is None or found is None or notified.hash != sending.delivery:
        return None
    kind, body = found
    waited = (clock() - open_attempt.recorded_at) / 1e9
    closed = WebhookSent(
        delivery=sending.delivery,
        attempt=sending.attempt,
        outcome="retrying",
        error=f"outcome unknown: {sending.sender} recorded none {waited:.1f} s after sending "
        f"(over {hook.stale_s:g} s: it stopped mid-attempt); {sender} takes the delivery over",
        taken_over_by=sender,
    )
    try:
        await store.append(
            str(open_attempt.stream),
            [CODEC.encode(closed, recorded_at=clock())],
            expected_seq=open_attempt.seq + 1,
        )
    except ConcurrencyError:
        return None
    ok, attempts, why = await deliver(
        hook, kind, notified, body, store=store, sender=sender, clock=clock,
        first_attempt=sending.attempt + 1, seq=open_attempt.seq + 2,
    )  # fmt: skip
    return kind, notified, ok, attempts, why


async def _event(store: EventStore, stream: str, seq: int) -> Event | None:
    async with closing(store.read(stream, from_seq=seq, to_seq=seq + 1)) as events:
        async for event in events:
            return event
    return None


class Notifier:
    """Follows the log and notifies ``hook`` (see the module docstring)."""

    def __init__(
        self,
        store: EventStore,
        hook: Webhook,
        sender: str = "",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store, self.hook, self.clock = store, hook, clock
        self.sender = sender or driver_name("serve")
        self.outcomes: list[tuple[str, bool, int, str]] = []  # (delivery, ok, attempts, why)
        self.watched: dict[str, Event] = {}  # webhook stream -> another server's open attempt

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        last = getattr(self.store, "last_position", None)
        start = int(await last()) + 1 if last is not None else 0
        await self._open_attempts()
        in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sweep, nursery, in_flight)
            task_status.started()
            async with closing(self.store.follow(from_position=start)) as events:
                async for event in events:
                    self._watch(event)
                    found = payload(event)
                    if found is not None:
                        await in_flight.acquire()  # a slow receiver slows this, not the log
                        nursery.start_soon(self._one, event, *found, in_flight)

    async def _open_attempts(self) -> None:
        """The attempts left open when this server starts: a webhook stream of odd
        length ends with a ``webhook.sending``. (One pass over the stream list, at
        start only.)"""
        for info in await self.store.streams():
            if info.stream.startswith(WEBHOOK_PREFIX) and info.length % 2 == 1:
                event = await _event(self.store, info.stream, info.length - 1)
                if event is not None:
                    self._watch(event)

    def _watch(self, event: Event) -> None:
        """Keep another server's open attempts in view; forget them once closed."""
        tag = event.type.split("@")[0]
        if tag == WebhookSent.event_type:
            self.watched.pop(str(event.stream), None)
        elif tag == WebhookSending.event_type:
            sending = CODEC.decode(event)
            if isinstance(sending, WebhookSending) and sending.sender != self.sender:
                self.watched[str(event.stream)] = event

    async def _sweep(self, nursery: trio.Nursery, in_flight: trio.Semaphore) -> None:
        """Take over, as the retry loop goes, each watched attempt open past its bound."""
        bound_ns = int(self.hook.stale_s * 1e9)
        while True:
            now = self.clock()
            for stream, event in list(self.watched.items()):
                if now - event.recorded_at > bound_ns:
                    del self.watched[stream]
                    await in_flight.acquire()
                    nursery.start_soon(self._take_over, event, in_flight)
            await trio.sleep(min(1.0, self.hook.stale_s / 4))

    async def _take_over(self, event: Event, in_flight: trio.Semaphore) -> None:
        try:
            taken = await take_over(
                self.hook, self.store, event, sender=self.sender, clock=self.clock
            )
        except DeliveryTakenError:
            return
        finally:
            in_flight.release()
        if taken is not None:
            kind, notified, ok, attempts, why = taken
            log.warning(
                "webhook: took over delivery %s from a server that stopped mid-attempt",
                notified.hash,
            )
            self._report(notified, kind, ok, attempts, why)

    async def _one(self, event: Event, kind: str, body: bytes, in_flight: trio.Semaphore) -> None:
        try:
            ok, attempts, why = await deliver(
                self.hook, kind, event, body, store=self.store, sender=self.sender,
                clock=self.clock,
            )  # fmt: skip
        except DeliveryTakenError:
            return  # another server of this log notifies it
        finally:
            in_flight.release()
        self._report(event, kind, ok, attempts, why)

    def _report(self, event: Event, kind: str, ok: bool, attempts: int, why: str) -> None:
        self.outcomes.append((event.hash, ok, attempts, why))
        del self.outcomes[:-1000]
        where = f"{kind} of session {visible(str(event.stream))} (seq {event.seq})"
        if ok:
            log.info("webhook: %s delivered after %d attempt(s) (%s)", where, attempts, why)
        else:
            log.error("webhook: %s NOT delivered after %d attempt(s): %s", where, attempts, why)
