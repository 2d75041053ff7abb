"""Fixtures for the otel tests: a realistic recorded session and a real OTLP/HTTP receiver.

The session is built from the event catalog exactly as the runtime records one (bodies
encoded with ``CODEC``, prompt blobs appended with their events), so the tests do not
depend on the runtime. ``bench/otel.py`` loads this file to build its sessions too.
"""

from __future__ import annotations

import hashlib
import http.server
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from eventlog import EventStore, MemoryStore, NewEvent
from orchestrator._events import (
    CODEC,
    ApprovalRequested,
    ApprovalResolved,
    CatalogSnapshot,
    ModelFailed,
    ModelResponded,
    PolicyConfig,
    PolicyDenied,
    PromptRendered,
    ResourceRead,
    ScriptExecuted,
    SessionEnded,
    SessionStarted,
    SkillActivated,
    SkillActivationFailed,
    SkillInfo,
    ToolCalled,
    ToolCompleted,
    UserMessage,
)
from orchestrator._model import (
    Message,
    ModelResponse,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    encode_canonical,
)

T0 = 1_750_000_000_000_000_000
MS = 1_000_000
SYSTEM = "You can use Agent Skills."
PDF_HASH = hashlib.sha256(b"pdf skill").hexdigest()
CSV_HASH = hashlib.sha256(b"csv skill").hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class SessionBuilder:
    """Accumulates one session's events and blobs with increasing ``recorded_at``."""

    def __init__(self, t0: int) -> None:
        self.now = t0
        self.events: list[NewEvent] = []
        self.blobs: list[bytes] = []
        self.history: list[Message] = []
        self.turn = 0

    def add(self, body: Any, after_ms: int = 1) -> None:
        self.now += after_ms * MS
        self.events.append(CODEC.encode(body, recorded_at=self.now))

    def prompt(self, new: int) -> None:
        """A request whose last ``new`` history messages were not sent before."""
        self.turn += 1
        lines = [encode_canonical(m) + b"\n" for m in self.history[len(self.history) - new :]]
        tail = (
            encode_canonical(
                {"max_tokens": 1024, "model": "scripted-1", "system": SYSTEM, "tools": []}
            )
            + b"\n"
        )
        self.blobs += [*lines, tail]
        request = b"".join(encode_canonical(m) + b"\n" for m in self.history) + tail
        self.add(
            PromptRendered(
                turn=self.turn,
                request_hash=_digest(request),
                message_count=len(self.history),
                new_message_digests=tuple(_digest(x) for x in lines),
                tail_digest=_digest(tail),
            )
        )

    def respond(self, *parts: TextPart | ToolCall, stop: Any, tokens: tuple[int, int]) -> None:
        response = ModelResponse(
            parts=parts,
            stop_reason=stop,
            usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
            model="scripted-1-2025",
            id=f"resp_{self.turn}",
        )
        self.history.append(Message(role="assistant", parts=parts))
        self.add(ModelResponded(turn=self.turn, response=response, duration_ms=250), after_ms=250)

    def tool(self, call_id: str, tool: str, arguments: str, skills: tuple[str, ...] = ()) -> None:
        self.add(
            ToolCalled(
                turn=self.turn, call_id=call_id, tool=tool, arguments=arguments, skills=skills
            )
        )

    def done(self, call_id: str, tool: str, content: str, error: str | None = None) -> None:
        self.add(
            ToolCompleted(
                call_id=call_id,
                tool=tool,
                is_error=error is not None,
                content=content,
                duration_ms=4,
                error_type=error,
            ),
            after_ms=5,
        )
        self.history_tool(call_id, content, error is not None)

    def history_tool(self, call_id: str, content: str, is_error: bool) -> None:
        part = ToolResult(call_id=call_id, content=content, is_error=is_error)
        if self.history and self.history[-1].role == "tool":
            last = self.history.pop()
            self.history.append(Message(role="tool", parts=(*last.parts, part)))
        else:
            self.history.append(Message(role="tool", parts=(part,)))


def build_session(t0: int = T0, *, end: bool = True) -> tuple[list[NewEvent], list[bytes]]:
    """A four-turn session touching every kind of event the mapping handles.

    Turn 1 loads ``pdf`` (and fails to load ``nope``); turn 2 reads a reference and runs
    a script that exits 3; turn 3 asks to run a third-party script, which the operator
    refuses (approval + policy denial); turn 4's model call is rate limited, retried,
    and times out, and the session ends with an error. Spans: 1 root, 4 chat, 4 tools.
    """
    b = SessionBuilder(t0)
    b.add(
        SessionStarted(
            agent="demo-agent",
            provider="skillog.scripted",
            model="scripted-1",
            max_tokens=1024,
            max_turns=8,
            max_active_skills=4,
            file_access=True,
            policy=PolicyConfig(),
            version="0.1.0",
        ),
        after_ms=0,
    )
    b.add(
        CatalogSnapshot(
            skills=(
                SkillInfo(
                    name="pdf", description="PDFs", hash=PDF_HASH, tier="builtin", source="builtin"
                ),
                SkillInfo(
                    name="csv-tools",
                    description="CSV",
                    hash=CSV_HASH,
                    tier="third-party",
                    source="acme",
                ),
            )
        )
    )
    user = Message(role="user", parts=(TextPart(text="Summarize report.pdf"),))
    b.add(UserMessage(text="Summarize report.pdf"))
    b.history.append(user)
    b.prompt(1)
    load = ToolCall(id="call_1", name="skills.load", arguments='{"names": ["pdf", "nope"]}')
    b.respond(TextPart(text="Loading the pdf skill."), load, stop="tool_use", tokens=(120, 30))
    b.tool("call_1", "skills.load", load.arguments)
    b.blobs += [b"# pdf", b"guide", b"", b"boom"]  # every blob an event names is stored
    b.add(
        SkillActivated(
            name="pdf",
            hash=PDF_HASH,
            tier="builtin",
            source="builtin",
            mode="add",
            trigger="tool",
            body_digest=_digest(b"# pdf"),
            files=(),
            call_id="call_1",
        )
    )
    b.add(SkillActivationFailed(name="nope", reason="not in the catalog", call_id="call_1"))
    b.done("call_1", "skills.load", "loaded: pdf; not found: nope")

    b.prompt(2)
    read = ToolCall(
        id="call_2", name="skills.read", arguments='{"skill": "pdf", "path": "references/guide.md"}'
    )
    run = ToolCall(
        id="call_3",
        name="skills.run_script",
        arguments='{"skill": "pdf", "path": "scripts/extract.py"}',
    )
    b.respond(read, run, stop="tool_use", tokens=(300, 40))
    b.tool("call_2", "skills.read", read.arguments, ("pdf",))
    b.add(
        ResourceRead(
            call_id="call_2",
            skill="pdf",
            path="references/guide.md",
            size=1200,
            digest=_digest(b"guide"),
        )
    )
    b.done("call_2", "skills.read", "# Guide\nUse extract.py.")
    b.tool("call_3", "skills.run_script", run.arguments, ("pdf",))
    b.add(
        ScriptExecuted(
            call_id="call_3",
            skill="pdf",
            path="scripts/extract.py",
            args=("report.pdf",),
            exit_code=3,
            duration_ms=40,
            stdout_digest=_digest(b""),
            stderr_digest=_digest(b"boom"),
            sandbox="bwrap",
            network=False,
            timed_out=False,
            truncated=False,
        ),
        after_ms=40,
    )
    b.done("call_3", "skills.run_script", "exit code 3: boom", error="script_failed")

    b.prompt(2)
    convert = ToolCall(
        id="call_4",
        name="skills.run_script",
        arguments='{"skill": "csv-tools", "path": "scripts/convert.sh"}',
    )
    b.respond(convert, stop="tool_use", tokens=(420, 25))
    b.tool("call_4", "skills.run_script", convert.arguments, ("pdf",))
    b.add(
        ApprovalRequested(
            call_id="call_4",
            tool="skills.run_script",
            action="run scripts/convert.sh",
            skill="csv-tools",
            tier="third-party",
        )
    )
    b.add(ApprovalResolved(call_id="call_4", approved=False, decided_by="operator"), after_ms=900)
    b.add(
        PolicyDenied(
            call_id="call_4",
            tool="skills.run_script",
            rule="approval",
            reason="the operator refused",
            skill="csv-tools",
        )
    )
    b.done("call_4", "skills.run_script", "denied: the operator refused", error="policy_denied")

    b.prompt(2)
    b.add(
        ModelFailed(
            turn=4,
            kind="rate_limited",
            message="429 slow down",
            attempt=1,
            will_retry=True,
            retry_after_ms=1000,
            duration_ms=30,
        ),
        after_ms=30,
    )
    b.add(
        ModelFailed(
            turn=4,
            kind="timeout",
            message="no answer in 5 s",
            attempt=2,
            will_retry=False,
            duration_ms=5000,
        ),
        after_ms=6000,
    )
    if end:
        b.add(SessionEnded(reason="error", turns=4, error="model timed out"))
    return b.events, b.blobs


async def append_session(store: EventStore, stream: str, t0: int = T0, *, end: bool = True) -> None:
    """Append the session of :func:`build_session` as stream ``stream``, blobs included."""
    events, blobs = build_session(t0, end=end)
    await store.append(stream, events, expected_seq=0, blobs=blobs)


@pytest.fixture
async def store() -> MemoryStore:
    """A MemoryStore holding the session ``s1``."""
    s = MemoryStore()
    await append_session(s, "s1")
    return s


# -- a real OTLP/HTTP receiver on loopback ---------------------------------------------


class Receiver:
    """An OTLP/HTTP endpoint on 127.0.0.1 that decodes what it is sent.

    ``status`` is the HTTP status it answers; ``hold`` makes it wait before answering
    until ``released`` is set (at the latest when the fixture ends); ``fail_after``
    makes it answer 503 once that many requests were accepted.
    """

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.status = 200
        self.hold = False
        self.released = threading.Event()
        self.fail_after: int | None = None
        self.attempts = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.attempts += 1
                    status = receiver.status
                    if (
                        receiver.fail_after is not None
                        and len(receiver.requests) >= receiver.fail_after
                    ):
                        status = 503
                if receiver.hold:
                    receiver.released.wait(60)
                if status == 200:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    with receiver.lock:
                        receiver.requests.append(request)
                        receiver.paths.append(self.path)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:  # the client gave up waiting (slow-endpoint tests)
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @staticmethod
    def attrs(span: Any) -> dict[str, Any]:
        return attrs_of(span)

    @property
    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    try:
        yield r
    finally:
        r.released.set()
        r.server.shutdown()
        r.server.server_close()
        r.thread.join(5)


@pytest.fixture
def closed_port_url() -> str:
    """The URL of a loopback port nothing listens on (connections are refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def attrs_of(span: Any) -> dict[str, Any]:
    """A decoded OTLP span's attributes as a plain dict."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = tuple(getattr(x, x.WhichOneof("value")) for x in v.array_value.values)
        else:
            out[kv.key] = getattr(v, kind)
    return out


@pytest.fixture
def kit() -> Any:
    """This module: its builders and constants (test modules cannot import conftest)."""
    return sys.modules[__name__]
