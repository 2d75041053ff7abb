"""Summarising earlier turns with a recorded model call (policy.context.summarise):
the intent and the answer in the log, the summary a blob, replay and re-drive byte
exact, fork and crash-resume as a continuous run, drop_turns as the fallback
(docs/context.md)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import MemoryStore, NewEvent
from orchestrator._context import (
    SUMMARY_PREFIX,
    SUMMARY_SYSTEM,
    plan_drop_turns,
    summary_compaction,
    summary_request,
)
from orchestrator._events import (
    ContextCompacted,
    ContextPolicy,
    ModelResponded,
    PolicyConfig,
    PromptRendered,
    SessionEnded,
    SessionStarted,
    SkillActivated,
    SummaryAnswered,
    SummaryRequested,
)
from orchestrator._loop import Agent
from orchestrator._model import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from orchestrator._prompt import request_bytes
from orchestrator.adapters import ScriptedModel
from replay import load_recording
from replay._fork import fork_session

from .test_context import WINDOW, _big_skill, _proves, _read_turns, histories

SUMMARISE = PolicyConfig(approve=(), context=ContextPolicy(summarise=True, summary_max_tokens=300))


class Summarising:
    """The scripted model, and a stand-in for the model's summaries: a summary request
    (its system prompt) is answered with a short text naming how big it was, or fails
    with ``fail`` (a test double at the model boundary only)."""

    def __init__(self, turns: list[dict[str, Any]], *, fail: ModelError | None = None) -> None:
        self.inner = ScriptedModel(turns)
        self.fail = fail
        self.summaries: list[ModelRequest] = []

    @property
    def provider(self) -> str:
        return self.inner.provider

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.system != SUMMARY_SYSTEM:
            return await self.inner.complete(request)
        self.summaries.append(request)
        if self.fail is not None:
            raise self.fail
        size = len(request_bytes(request))
        return ModelResponse(
            parts=(TextPart(text=f"Summary {len(self.summaries)}: read parts ({size} bytes)."),),
            stop_reason="end_turn",
            usage=Usage(input_tokens=size // 4, output_tokens=12),
        )


def _agent(make_skill: Any, model: Summarising, policy: PolicyConfig = SUMMARISE) -> Agent:
    return Agent(
        model=model,
        model_name="test-model",
        skills=[_big_skill(make_skill, files=3)],
        policy=policy,
        context_window=WINDOW,
        max_turns=100,
    )


async def test_older_turns_are_summarised_by_a_recorded_model_call(kit, make_skill) -> None:
    store = MemoryStore()
    model = Summarising(_read_turns(30, files=3))
    session = await _agent(make_skill, model).run(store, "read everything")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    asked = kit.of_type(bodies, SummaryRequested)
    answered = kit.of_type(bodies, SummaryAnswered)
    assert len(asked) == len(answered) == len(model.summaries) >= 2
    summaries = [c for c in kit.of_type(bodies, ContextCompacted) if c.step == "summarise"]
    assert len(summaries) == len(asked)
    assert not [c for c in kit.of_type(bodies, ContextCompacted) if c.step == "drop_turns"]
    for request, intent in zip(model.summaries, asked, strict=True):
        # The request sent is the one the intent names, stored as a blob before sending.
        assert await store.get_blob(intent.request_hash) == request_bytes(request)
        assert request.max_tokens == 300 and request.tools == ()
    for at, intent in enumerate(bodies):
        if isinstance(intent, SummaryRequested):
            answer, compaction = bodies[at + 1], bodies[at + 2]
            assert isinstance(answer, SummaryAnswered) and answer.response is not None
            assert isinstance(compaction, ContextCompacted)
            assert compaction.dropped == intent.dropped
            text = answer.response.text
            assert compaction.note.startswith(SUMMARY_PREFIX) and compaction.note.endswith(text)
            assert await store.get_blob(compaction.summary_digest) == text.encode()
    # The summary is what the model reads in place of the turns, and its calls count.
    assert "Summary 1: read parts" in str(session.state.messages[0])
    assert session.state.summary_tokens == sum(
        a.response.usage.input_tokens + a.response.usage.output_tokens
        for a in answered
        if a.response is not None
    )
    await _proves(store, session.id)


async def test_a_failed_summary_falls_back_to_dropping_the_turns(kit, make_skill) -> None:
    store = MemoryStore()
    model = Summarising(_read_turns(20, files=3), fail=ModelError("boom", kind="http"))
    session = await _agent(make_skill, model).run(store, "read")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    answered = kit.of_type(bodies, SummaryAnswered)
    assert answered and all(a.response is None and a.error == "boom" for a in answered)
    at = bodies.index(answered[0])
    fallback = bodies[at + 1]
    assert isinstance(fallback, ContextCompacted) and fallback.step == "drop_turns"
    assert fallback.summary_digest == ""
    await _proves(store, session.id)


async def test_past_the_summary_budget_turns_are_dropped(kit, make_skill) -> None:
    store = MemoryStore()
    policy = msgspec.structs.replace(
        SUMMARISE, context=ContextPolicy(summarise=True, summary_budget_tokens=1)
    )
    model = Summarising(_read_turns(30, files=3))
    session = await _agent(make_skill, model, policy).run(store, "read")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    steps = [c.step for c in kit.of_type(bodies, ContextCompacted)]
    assert steps.count("summarise") == 1 and "drop_turns" in steps
    assert steps.index("summarise") < steps.index("drop_turns")
    await _proves(store, session.id)


async def test_fork_from_before_a_summary_replays_and_summarises_again(kit, make_skill) -> None:
    store = MemoryStore()
    model = Summarising(_read_turns(20, files=3))
    agent = _agent(make_skill, model)
    session = await agent.run(store, "read")
    bodies = await kit.bodies(store, session.id)
    first = next(i for i, b in enumerate(bodies) if isinstance(b, SummaryRequested))
    recording = await load_recording(store, session.id)
    fork = await fork_session(store, recording, first - 1, session_id="fork")
    agent.model = Summarising(_read_turns(20, files=3)[8:])
    resumed = await agent.resume(store, fork)
    forked = await kit.bodies(store, resumed.id)
    assert isinstance(forked[-1], SessionEnded) and forked[-1].reason == "completed"
    assert kit.of_type(forked, SummaryAnswered)
    await _proves(store, "fork")


def _digests(bodies: list[Any]) -> list[str]:
    out: list[str] = []
    for b in bodies:
        if isinstance(b, SkillActivated):
            out += [b.body_digest, *(f.sha256 for f in b.files)]
        if isinstance(b, PromptRendered):
            out += [*b.new_message_digests, b.tail_digest]
        if isinstance(b, SummaryRequested):
            out.append(b.request_hash)
    return out


@pytest.mark.parametrize("after", ["intent", "answer"])
async def test_a_process_stopping_around_a_summary_resumes_as_a_continuous_run(
    kit, make_skill, after: str
) -> None:
    """Write-ahead: the intent (with the request's bytes) is durable before the model is
    asked; a process that stops before the answer is recorded leaves it pending, and the
    one that resumes asks for the same request and goes on as a continuous run did; one
    that stops right after the answer (and its compaction, one transaction) renders
    the next request from the summarised history."""
    store = MemoryStore()
    turns = _read_turns(20, files=3)
    agent = _agent(make_skill, Summarising(turns))
    full = await agent.run(store, "read")
    bodies = await kit.bodies(store, full.id)
    cut = next(i for i, b in enumerate(bodies) if isinstance(b, SummaryRequested))
    if after == "answer":
        cut += 2
        assert isinstance(bodies[cut], ContextCompacted) and bodies[cut].step == "summarise"
    events = [e async for e in store.read(full.id)]
    crashed = MemoryStore()
    await crashed.append(
        "s",
        [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in events[: cut + 1]],
        expected_seq=0,
        blobs=[await store.get_blob(d) for d in _digests(bodies[: cut + 1])],
    )
    used = sum(1 for b in bodies[: cut + 1] if isinstance(b, ModelResponded))
    model = Summarising(turns[used:])
    agent.model = model
    await agent.resume(crashed, "s")
    again = await kit.bodies(crashed, "s")
    assert [type(b).__name__ for b in again] == [type(b).__name__ for b in bodies]
    asked = [b for b in bodies if isinstance(b, SummaryRequested)]
    first = asked[0 if after == "intent" else 1]
    assert request_bytes(model.summaries[0]) == await store.get_blob(first.request_hash)
    await _proves(crashed, "s")


# -- properties: what a summary never takes away ------------------------------------------


def _config(keep: int) -> SessionStarted:
    policy = PolicyConfig(context=ContextPolicy(summarise=True, keep_turns=keep))
    return SessionStarted(
        agent="a",
        provider="p",
        model="m",
        max_tokens=100,
        max_turns=10,
        max_active_skills=3,
        file_access=False,
        policy=policy,
        context_window=1000,
    )


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 5), st.booleans())
def test_a_summary_keeps_the_task_the_last_turns_and_every_unanswered_call(
    case: tuple[list[Message], list[str]], keep: int, answered: bool
) -> None:
    messages, _ = case
    dropped, _ = plan_drop_turns(messages, keep)
    if not dropped:
        return
    config = _config(keep)
    request = summary_request(messages, dropped, config)
    intent = SummaryRequested(
        dropped=dropped, request_hash="x", reason="budget", tokens_before=0, budget=0, threshold=0
    )
    response = ModelResponse(parts=(TextPart(text="the gist"),), stop_reason="end_turn")
    event = summary_compaction(messages, intent, response if answered else None, config, tail=b"")
    assert event is not None and event.step == ("summarise" if answered else "drop_turns")
    after = messages[:1] + messages[1 + dropped :]
    after[0] = Message(role="user", parts=(*messages[0].parts, TextPart(text=event.note)))
    # The task stays first, word for word; the summary is added after it.
    assert after[0].parts[: len(messages[0].parts)] == messages[0].parts
    # Whole turns only: every call summarised had its result, every later one is kept.
    summarised = messages[1 : 1 + dropped]
    calls = {p.id for m in summarised for p in m.parts if isinstance(p, ToolCall)}
    results = {p.call_id for m in summarised for p in m.parts if isinstance(p, ToolResult)}
    assert calls == results
    assert messages[1 + dropped :] == after[1:]
    assert after[1].role == "assistant" if len(after) > 1 else True
    # The last `keep` turns (at least one) are never summarised.
    assert sum(1 for m in after if m.role == "assistant") >= max(1, keep) or not any(
        m.role == "tool" for m in messages[1 + dropped :]
    )
    # The summary request shows the task and the summarised turns, and offers no tools.
    text = request.messages[0].parts[0]
    assert isinstance(text, TextPart) and "<task>\ngo\n</task>" in text.text
    assert request.tools == () and request.system == SUMMARY_SYSTEM


async def test_otel_shows_each_summary_call_as_a_chat_span_with_its_usage(make_skill) -> None:
    from orchestrator._events import CODEC
    from otel import map_session

    store = MemoryStore()
    session = await _agent(make_skill, Summarising(_read_turns(20, files=3))).run(store, "read")
    events = [e async for e in store.read(session.id)]
    bodies = [CODEC.decode(e) for e in events]
    answered = [b for b in bodies if isinstance(b, SummaryAnswered)]
    spans, _ = map_session(events, content=False, metrics=False)
    summaries = [s for s in spans if "skillog.summary.messages" in s.attributes]
    assert len(summaries) == len(answered) > 0
    for span, answer in zip(summaries, answered, strict=True):
        assert span.name == "chat test-model" and answer.response is not None
        assert span.attributes["gen_ai.usage.output_tokens"] == answer.response.usage.output_tokens
