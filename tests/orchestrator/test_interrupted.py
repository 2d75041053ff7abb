"""A model call cancelled mid-stream: ``model.interrupted`` records what arrived (the
partial text a blob), the prompt stays open, and resuming sends the same request
again; verify, replay and re-drive know the event (docs/events.md)."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from eventlog import MemoryStore, verify
from orchestrator._events import (
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    PolicyConfig,
    PromptRendered,
    SessionEnded,
)
from orchestrator._grammar import session_grammar
from orchestrator._loop import Agent
from orchestrator._model import Delta, DeltaSink, ModelRequest, ModelResponse
from orchestrator._prompt import request_hash
from orchestrator.adapters import ScriptedModel
from replay import load_recording, replay_session

from .test_context import _proves


class Stalling:
    """Streams a few pieces of text and a tool call's start, then never finishes (a
    test double at the model boundary: the provider hanging mid-answer)."""

    provider = "skillog.scripted"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.stream(request, lambda d: None)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        self.requests.append(request)
        for piece in ("Reading the ", "first part\x1b[2J"):
            on_delta(Delta(kind="text", index=0, text=piece))
            await trio.lowlevel.checkpoint()
        on_delta(Delta(kind="tool_call", index=1, call_id="c1", name="skills.read"))
        await trio.sleep_forever()
        raise AssertionError("unreachable")


class Recording:
    """Answers like ``inner`` and keeps the requests it was sent."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.complete(request)


async def _cancelled_mid_stream(store: MemoryStore, stalling: Stalling) -> str:
    """Run a session and cancel it once a tool call's start has streamed in."""
    seen: list[Delta] = []
    with trio.CancelScope() as scope:

        def on_delta(delta: Delta) -> None:
            seen.append(delta)
            if delta.kind == "tool_call":
                scope.cancel()

        agent = Agent(
            model=stalling, model_name="m", policy=PolicyConfig(approve=()), on_delta=on_delta
        )
        await agent.run(store, "read it", session_id="s")
    assert scope.cancelled_caught and len(seen) == 3
    return "s"


async def test_a_call_cancelled_mid_stream_records_what_arrived_and_resume_retries(
    kit,
) -> None:
    store = MemoryStore()
    stalling = Stalling()
    session = await _cancelled_mid_stream(store, stalling)
    bodies = await kit.bodies(store, session)
    last = bodies[-1]
    assert isinstance(last, ModelInterrupted), last
    assert (last.turn, last.attempt, last.calls) == (1, 1, ("skills.read",))
    text = b"Reading the first part\x1b[2J"
    assert last.text_size == len(text) and await store.get_blob(last.text_digest) == text
    [prompt] = kit.of_type(bodies, PromptRendered)
    # Resume (another process): the same request again, no second prompt, and no
    # model.failed saying the process stopped (model.interrupted said so).
    model = Recording(ScriptedModel([{"text": "done"}]))
    agent = Agent(model=model, model_name="m", policy=PolicyConfig(approve=()))
    await agent.resume(store, session)
    after = await kit.bodies(store, session)
    assert request_hash(model.requests[0]) == prompt.request_hash
    assert request_hash(model.requests[0]) == request_hash(stalling.requests[0])
    assert len(kit.of_type(after, PromptRendered)) == 1
    assert not kit.of_type(after, ModelFailed)
    assert [type(b) for b in after[len(bodies) :]] == [ModelResponded, SessionEnded]
    await _proves(store, session)


async def test_a_session_interrupted_and_never_resumed_verifies_and_replays(kit) -> None:
    store = MemoryStore()
    session = await _cancelled_mid_stream(store, Stalling())
    report = await verify(store, grammar=session_grammar)
    assert report.ok, report.faults
    recording = await load_recording(store, session)
    assert (await replay_session(store, recording)).ok


async def test_otel_marks_the_interruption_on_the_chat_span(kit) -> None:
    from otel import map_session

    store = MemoryStore()
    session = await _cancelled_mid_stream(store, Stalling())
    agent = Agent(
        model=ScriptedModel([{"text": "done"}]), model_name="m", policy=PolicyConfig(approve=())
    )
    await agent.resume(store, session)
    events = [e async for e in store.read(session)]
    spans, _ = map_session(events, content=False, metrics=False)
    [chat] = [s for s in spans if s.name.startswith("chat")]
    assert [e.name for e in chat.events] == ["skillog.model.interrupted"]
    assert "error.type" not in chat.attributes


FULL = "".join(f"piece {i:02d} of text. " for i in range(40))  # 16 bytes a streamed piece


def test_ctrl_c_on_skillog_run_mid_answer_records_the_partial_text_and_resume_completes(
    tmp_path: Path,
) -> None:
    """A real `skillog run` on a terminal, SIGINT while a slow scripted model streams
    its answer: the log holds model.interrupted with the text that had arrived, `skillog
    resume` sends the same request and completes, `log verify` and `replay --redrive`
    pass."""
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "SKILLOG_CONFIG": str(tmp_path / "config.yaml"),
    }
    script = tmp_path / "turns.yaml"
    script.write_text(f"turns:\n  - text: {json.dumps(FULL)}\n    stream_delay_ms: 50\n")
    db = tmp_path / "log.db"
    cli = [sys.executable, "-m", "orchestrator.cli"]
    model = ["--model", f"scripted:{script}", "--db", str(db)]
    primary, secondary = pty.openpty()  # stderr a terminal: the answer streams
    proc = subprocess.Popen(
        [*cli, "run", "say it", *model, "--project", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        cwd=tmp_path,
        env=env,
        # Ctrl-C live, as on a terminal, even when this suite was started with SIGINT
        # ignored (a background job of a non-interactive shell: `.ci/run &`), which the
        # child would inherit, and which Python then leaves ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(secondary)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"piece 03" not in seen:  # a few pieces have arrived on the terminal
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([primary], [], [], 1)
            if ready:
                seen += os.read(primary, 4096)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        with contextlib.suppress(OSError):  # the rest of stderr (EIO once it closed)
            while select.select([primary], [], [], 0.2)[0]:
                seen += os.read(primary, 4096)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    assert proc.returncode == 130, seen
    assert b"interrupted" in seen and b"Traceback" not in seen, seen

    session, interrupted, blob = trio.run(_interruption, db)
    text = blob.decode()
    assert 0 < len(text) < len(FULL) and FULL.startswith(text), text
    assert interrupted.text_size == len(blob) and interrupted.turn == 1

    done = subprocess.run(
        [*cli, "resume", session, *model], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "completed after 1 turn" in done.stdout, done.stdout
    for check in (["log", "verify"], ["replay", session, "--redrive"]):
        out = subprocess.run(
            [*cli, *check, "--db", str(db)], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stdout + out.stderr
    assert "every request reproduced byte for byte" in out.stdout


async def _interruption(db: Path) -> tuple[str, ModelInterrupted, bytes]:
    """The session in ``db``, its model.interrupted and the partial text's blob."""
    from eventlog import open_sqlite_store
    from orchestrator._streams import is_session_stream

    from .conftest import bodies as read_bodies

    async with open_sqlite_store(db) as store:
        [session] = [s.stream for s in await store.streams() if is_session_stream(s.stream)]
        bodies = await read_bodies(store, session)
        [interrupted] = [b for b in bodies if isinstance(b, ModelInterrupted)]
        assert isinstance(bodies[-1], ModelInterrupted)  # nothing after it
        return session, interrupted, await store.get_blob(interrupted.text_digest)
