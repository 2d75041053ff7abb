"""Webhook notifications against a real local HTTP receiver: an approval request and the
session's end arrive signed (HMAC-SHA256), a refused delivery is retried with backoff,
the delivery id is the event's hash, and each outcome is logged."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio

from eventlog import EventStore, closing, verify_stream
from orchestrator._grammar import check_stream
from orchestrator.cli import main
from orchestrator.service import Webhook
from orchestrator.service._notify import DeliveryTakenError, WebhookError, deliver

from .conftest import running_service
from .test_api import submit, wait_for
from .test_deploy import approve

SECRET = b"a secret of sixteen or more"


async def _recorded(store: EventStore, delivery: str) -> list[tuple[str, dict[str, Any]]]:
    """The delivery's stream: (type, body) of each event, once its last attempt has an
    outcome; its chain and grammar checked."""
    with trio.fail_after(20):
        while True:
            async with closing(store.read(f"webhook/{delivery}")) as events:
                found = [e async for e in events]
            if found and json.loads(found[-1].body).get("outcome") in ("delivered", "failed"):
                break
            await trio.sleep(0.05)
    _, fault = await verify_stream(store, f"webhook/{delivery}")
    assert fault is None
    rows = [(e.seq, e.type, e.body) for e in found]
    assert list(check_stream(f"webhook/{delivery}", rows)) == []
    return [(e.type.split("@")[0], json.loads(e.body)) for e in found]


async def verify_log(store: EventStore) -> list[object]:
    """Every fault ``skillog log verify`` would name, chain and grammar, in every stream."""
    faults = []
    for info in await store.streams():
        _, fault = await verify_stream(store, info.stream)
        if fault is not None:
            faults.append(fault)
        async with closing(store.read(info.stream)) as events:
            rows = [(e.seq, e.type, e.body) async for e in events]
        faults += list(check_stream(info.stream, rows))
    return faults


async def until(done: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while True:
            if done():
                return
            await trio.sleep(0.05)


@contextmanager
def receiver(fail_first: int) -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A real HTTP server on loopback: answers 503 to the first ``fail_first`` requests,
    then 204; every request it got, with its headers, in order."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(503 if len(got) <= fail_first else 204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_webhook_signed_retried_and_logged(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    config, tokens = service_env
    caplog.set_level(logging.INFO, "skillog.webhook")
    with receiver(fail_first=2) as (url, got):
        hook = Webhook(url, SECRET, attempts=4, backoff_s=0.05)
        async with running_service(tmp_path, config, tokens, webhook=hook) as service:
            session = await submit(service)
            await wait_for(service, session, "awaiting_approval")
            await until(
                lambda: any(h["x-skillog-event"] == "approval.requested" for h, _ in got[2:])
            )
            await approve(service, session)
            await wait_for(service, session, "ended")
            await until(lambda: any(h["x-skillog-event"] == "session.ended" for h, _ in got))
            async with service.client("victor") as client:
                page = await client.get(f"/api/sessions/{session}/events?limit=1000")
                listed = (await client.get("/api/sessions")).json()["sessions"]
            await until(lambda: len(got) == 4)
            recorded = await _recorded(service.store, got[0][0]["x-skillog-delivery"])
            ended = await _recorded(service.store, got[-1][0]["x-skillog-delivery"])
            # Another server of the same log finds the delivery claimed: it sends nothing.
            async with closing(service.store.read(session)) as events:
                asked = [e async for e in events if e.type.startswith("approval.requested")]
            with pytest.raises(DeliveryTakenError):
                await deliver(hook, "approval.requested", asked[0], b"{}",
                              store=service.store, sender="serve:other")  # fmt: skip
            assert len(got) == 4
            assert not await verify_log(service.store)
    # Each attempt is recorded in the delivery's own stream, in no session's, checked by
    # its grammar: two refusals and the delivery, then the end delivered at once.
    assert [(t, b.get("attempt"), b.get("outcome"), b.get("status")) for t, b in recorded] == [
        ("webhook.sending", 1, None, None), ("webhook.sent", 1, "retrying", 503),
        ("webhook.sending", 2, None, None), ("webhook.sent", 2, "retrying", 503),
        ("webhook.sending", 3, None, None), ("webhook.sent", 3, "delivered", 204),
    ]  # fmt: skip
    assert recorded[0][1]["session"] == session and recorded[0][1]["kind"] == "approval.requested"
    assert [b.get("outcome") for _, b in ended] == [None, "delivered"]
    assert [r["session"] for r in listed] == [session]
    # `skillog log verify` over the whole file: chains, grammars, catalog.
    assert await trio.to_thread.run_sync(main, ["log", "verify", "--db", str(service.db)]) == 0
    # Two refusals, then the approval request again (same delivery id), then the end.
    kinds = [h["x-skillog-event"] for h, _ in got]
    assert kinds == ["approval.requested"] * 3 + ["session.ended"]
    assert len({h["x-skillog-delivery"] for h, _ in got[:3]}) == 1
    for headers, body in got:
        expected = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["x-skillog-signature"], expected)
        note = json.loads(body)
        assert note["session"] == session and note["hash"] == headers["x-skillog-delivery"]
    ended = json.loads(got[-1][1])
    assert ended["kind"] == "session.ended" and ended["body"]["reason"] == "completed"
    by_seq = {e["seq"]: e for e in page.json()["events"]}
    assert by_seq[ended["seq"]]["hash"] == ended["hash"]  # what was notified is the log
    lines = [r.getMessage() for r in caplog.records if r.name == "skillog.webhook"]
    assert any("approval.requested" in line and "after 3 attempt(s)" in line for line in lines)


async def test_a_receiver_that_refuses_is_given_up_on(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    config, tokens = service_env
    with receiver(fail_first=100) as (url, got):
        hook = Webhook(url, SECRET, attempts=3, backoff_s=0.05)
        async with running_service(tmp_path, config, tokens, webhook=hook) as service:
            session = await submit(service)
            await wait_for(service, session, "awaiting_approval")
            await until(lambda: any("NOT delivered" in r.getMessage() for r in caplog.records))
            await until(lambda: len(got) == 3)
            stream = await _recorded(service.store, got[0][0]["x-skillog-delivery"])
    assert [b.get("outcome") for _, b in stream] == [
        None,
        "retrying",
        None,
        "retrying",
        None,
        "failed",
    ]
    assert stream[-1][1]["status"] == 503
    assert len(got) == 3
    line = next(r.getMessage() for r in caplog.records if "NOT delivered" in r.getMessage())
    assert "after 3 attempt(s): HTTP 503" in line
    with pytest.raises(WebhookError):
        Webhook("file:///etc/passwd", SECRET)
