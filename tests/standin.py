"""A local stand-in for a provider's HTTP API: a real HTTP server on loopback (a thread
running ``http.server``) that the real ``anthropic`` and ``openai`` SDKs reach through
``base_url``. It answers each POST with the next scripted reply (JSON, or a stream of
server-sent events written and flushed one by one) and records every request: path,
headers and JSON body, so a test asserts what went on the wire.

A streamed reply can stop after ``hold_after`` events until the test sets
:attr:`StandIn.gate` (say, from the adapter's delta callback): the rest is sent only
once the client has shown it saw the first part, so a client that waited for the whole
body before handing out deltas fails instead of passing."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

HOLD_S = 10.0


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON
    events: list[bytes] | None = None  # SSE messages, each ending in a blank line
    hold_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


def anthropic_events(events: list[dict[str, Any]]) -> list[bytes]:
    """Anthropic's stream: ``event: TYPE`` and ``data: JSON`` per event."""
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def openai_events(chunks: list[dict[str, Any]]) -> list[bytes]:
    """OpenAI's stream: ``data: JSON`` per chunk, then ``data: [DONE]``."""
    return [*(f"data: {json.dumps(c)}\n\n".encode() for c in chunks), b"data: [DONE]\n\n"]


class StandIn:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Seen] = []
        self.gate = threading.Event()
        self.held = False  # a held stream went on because the gate opened
        self.url = ""

    def reply(self, reply: Reply) -> StandIn:
        self.replies.append(reply)
        return self

    def json(self, body: Any, status: int = 200, **headers: str) -> StandIn:
        return self.reply(Reply(status=status, body=body, headers=headers))

    def stream(self, events: list[bytes], *, hold_after: int | None = None) -> StandIn:
        return self.reply(Reply(events=events, hold_after=hold_after))

    @property
    def body(self) -> Any:
        """The JSON body of the last request."""
        return self.requests[-1].body

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length", "0"))
        raw = handler.rfile.read(length)
        self.requests.append(
            Seen(
                path=handler.path,
                headers={k.lower(): v for k, v in handler.headers.items()},
                body=json.loads(raw) if raw else None,
            )
        )
        reply = self.replies.pop(0)
        if reply.events is None:
            data = json.dumps(reply.body).encode()
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_response(reply.status)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.end_headers()  # HTTP/1.0: the body ends when the connection closes
        for i, event in enumerate(reply.events):
            if i == reply.hold_after:
                if not self.gate.wait(HOLD_S):
                    return  # the client never showed a delta: cut the stream short
                self.held = True
            handler.wfile.write(event)
            handler.wfile.flush()

    @contextmanager
    def serving(self) -> Iterator[StandIn]:
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                standin._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            self.gate.set()  # a handler still holding a stream lets go
            server.shutdown()
            server.server_close()
            thread.join(5)
