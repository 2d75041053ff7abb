"""Webhook notifications against a real local HTTP receiver: an approval request and the
session's end arrive signed (HMAC-SHA256), a refused delivery is retried with backoff,
the delivery id is the event's hash, and each outcome is logged."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio

from eventlog import EventStore, closing, open_store, verify_stream
from orchestrator._grammar import check_stream
from orchestrator.cli import main
from orchestrator.service import Webhook
from orchestrator.service._notify import DeliveryTakenError, WebhookError, deliver

from .conftest import running_service
from .test_api import submit, wait_for
from .test_cli_serve import start, stop
from .test_deploy import approve
from .test_faults import client, setup

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


@dataclass
class Hold:
    """Hold the first request unanswered (its sender may die meanwhile) until
    ``release``; ``first_in`` is set once it has arrived."""

    first_in: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@contextmanager
def receiver(
    fail_first: int, hold: Hold | None = None
) -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A real HTTP server on loopback: answers 503 to the first ``fail_first`` requests,
    then 204 (with ``hold``, the first only once released); every request it got, with
    its headers, in order."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            if hold is not None and len(got) == 1:
                hold.first_in.set()
                hold.release.wait(120)
            with contextlib.suppress(OSError):  # a held request's sender may be gone
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
        if hold is not None:
            hold.release.set()
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


def _webhook_streams(db: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    async def read() -> dict[str, list[tuple[str, dict[str, Any]]]]:
        async with open_store(str(db), readonly=True) as store:
            out = {}
            for info in await store.streams():
                if info.stream.startswith("webhook/"):
                    async with closing(store.read(info.stream)) as events:
                        out[info.stream] = [
                            (e.type.split("@")[0], json.loads(e.body)) async for e in events
                        ]
            return out

    return trio.run(read)


def _taken_over(
    got: list[tuple[dict[str, str], bytes]], recorded: list[tuple[str, dict[str, Any]]], killed: str
) -> None:
    """The receiver got the request twice, the same both times; the log says the first
    attempt's outcome is unknown, closed by the server that made the second."""
    assert len(got) == 2, [h for h, _ in got]
    (held, body), (again, body_again) = got
    assert body_again == body
    for name in ("x-skillog-delivery", "x-skillog-signature", "x-skillog-event"):
        assert again[name] == held[name], name
    expected = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(again["x-skillog-signature"], expected)
    summary = [(t, b["attempt"], b.get("outcome"), b.get("status")) for t, b in recorded]
    assert summary == [
        ("webhook.sending", 1, None, None), ("webhook.sent", 1, "retrying", 0),
        ("webhook.sending", 2, None, None), ("webhook.sent", 2, "delivered", 204),
    ]  # fmt: skip
    closed, retried = recorded[1][1], recorded[2][1]
    taker = retried["sender"]
    assert taker != killed and closed["taken_over_by"] == taker
    assert "outcome unknown" in closed["error"] and killed in closed["error"]


def _until_delivered(db: Path, stream: str) -> list[tuple[str, dict[str, Any]]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        recorded = _webhook_streams(db)[stream]
        if recorded[-1][1].get("outcome") == "delivered":
            break
        time.sleep(0.1)
    return recorded


def test_an_attempt_left_open_by_a_killed_server_is_taken_over(tmp_path: Path) -> None:
    """``skillog serve`` SIGKILLed while the receiver holds its request (the attempt is
    written ahead, its outcome never): the next server to start on the log closes it as
    unknown once it is older than its bound, and delivers again with the same delivery
    id, body and signature; the log verifies."""
    env, token, args = setup(tmp_path)
    env = {**env, "SKILLOG_WEBHOOK_SECRET": SECRET.decode()}
    hold = Hold()
    with receiver(0, hold) as (url, got):
        args = [*args, "--webhook", url, "--webhook-timeout", "1"]
        first, server = start(tmp_path, env, *args)
        try:
            with client(server, token) as c:
                c.post("/api/sessions", json={"task": "greet"}).raise_for_status()
            assert hold.first_in.wait(60), "no webhook request came"
        finally:
            first.send_signal(signal.SIGKILL)  # mid-attempt: no outcome recorded
            first.communicate(timeout=30)
        [(stream, left)] = _webhook_streams(tmp_path / "s.db").items()
        assert [t for t, _ in left] == ["webhook.sending"]
        killed = left[0][1]["sender"]
        second, _ = start(tmp_path, env, *args)
        try:
            recorded = _until_delivered(tmp_path / "s.db", stream)
        finally:
            stop(second)
    _taken_over(got, recorded, killed)
    assert main(["log", "verify", "--db", str(tmp_path / "s.db")]) == 0


def test_a_running_server_takes_over_what_a_killed_one_left_open(tmp_path: Path) -> None:
    """Two ``skillog serve`` on one log; the one whose attempt the receiver holds is
    SIGKILLed: the other, which saw the attempt begin while following the log, takes it
    over in its retry loop once it is older than its bound."""
    env, token, args = setup(tmp_path)
    env = {**env, "SKILLOG_WEBHOOK_SECRET": SECRET.decode()}
    hold = Hold()
    with receiver(0, hold) as (url, got):
        args = [*args, "--webhook", url, "--webhook-timeout", "1"]
        servers = [start(tmp_path, env, *args) for _ in range(2)]
        survivor = None
        try:
            with client(servers[0][1], token) as c:
                c.post("/api/sessions", json={"task": "greet"}).raise_for_status()
            assert hold.first_in.wait(60), "no webhook request came"
            [(stream, left)] = _webhook_streams(tmp_path / "s.db").items()
            killed = left[0][1]["sender"]
            pid = int(killed.split(":")[2])  # serve:host:pid:random
            [holder] = [p for p, _ in servers if p.pid == pid]
            [survivor] = [p for p, _ in servers if p.pid != pid]
            holder.send_signal(signal.SIGKILL)
            holder.communicate(timeout=30)
            recorded = _until_delivered(tmp_path / "s.db", stream)
        finally:
            for proc, _ in servers:
                if proc is not survivor and proc.poll() is None:
                    proc.kill()
                    proc.communicate(timeout=30)
            if survivor is not None:
                stop(survivor)
    _taken_over(got, recorded, killed)
    assert main(["log", "verify", "--db", str(tmp_path / "s.db")]) == 0
