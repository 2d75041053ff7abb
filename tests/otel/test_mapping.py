"""The mapping from a session's events to spans, checked through the SDK's in-memory exporter."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from eventlog import Event, MemoryStore, NewEvent
from otel import ExportOptions, export_sessions, map_session, span_id_for, trace_id_for


async def _events(store: MemoryStore, stream: str = "s1") -> list[Event]:
    return [e async for e in store.read(stream)]


async def _exported(store: MemoryStore, **options: Any) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    await export_sessions(store, exporter, options=ExportOptions(**options))
    return list(exporter.get_finished_spans())


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


async def test_tree_names_kinds_and_parents(store: MemoryStore) -> None:
    spans = await _exported(store)
    names = _by_name(spans)
    assert sorted((n, len(v)) for n, v in names.items()) == [
        ("chat scripted-1", 4),
        ("execute_tool skills.load", 1),
        ("execute_tool skills.read", 1),
        ("execute_tool skills.run_script", 2),
        ("invoke_agent demo-agent", 1),
    ]
    (root,) = names["invoke_agent demo-agent"]
    assert root.parent is None and root.kind is SpanKind.INTERNAL
    assert root.context is not None
    for span in spans:
        assert span.context is not None
        assert span.context.trace_id == root.context.trace_id
        if span is not root:
            assert span.parent is not None and span.parent.span_id == root.context.span_id
    assert {s.kind for s in names["chat scripted-1"]} == {SpanKind.CLIENT}
    assert len({s.context.span_id for s in spans if s.context}) == len(spans)


async def test_ids_are_derived_from_the_opening_events(store: MemoryStore) -> None:
    events = await _events(store)
    spans = await _exported(store)
    trace_id = trace_id_for("s1", events[0].hash)
    opening = {
        e.hash for e in events if e.type in ("session.started", "prompt.rendered", "tool.called")
    }
    assert {s.context.trace_id for s in spans if s.context} == {trace_id}
    assert {s.context.span_id for s in spans if s.context} == {span_id_for(h) for h in opening}


async def test_timestamps_are_the_recorded_ones(store: MemoryStore, kit: Any) -> None:
    events = await _events(store)
    by_id = {span_id_for(e.hash): e for e in events}
    spans = await _exported(store)
    root = _by_name(spans)["invoke_agent demo-agent"][0]
    assert root.start_time == events[0].recorded_at == kit.T0
    assert root.end_time == events[-1].recorded_at
    for span in spans:
        assert span.context is not None
        assert span.start_time == by_id[span.context.span_id].recorded_at
        assert span.end_time is not None and span.start_time is not None
        assert span.start_time <= span.end_time
    load = _by_name(spans)["execute_tool skills.load"][0]
    done = next(e for e in events if e.type == "tool.completed")
    assert load.end_time == done.recorded_at


async def test_genai_attributes(store: MemoryStore, kit: Any) -> None:
    names = _by_name(await _exported(store))
    root = dict(names["invoke_agent demo-agent"][0].attributes or {})
    assert root["gen_ai.operation.name"] == "invoke_agent"
    assert root["gen_ai.agent.name"] == "demo-agent"
    assert root["gen_ai.provider.name"] == "skillog.scripted"
    assert root["gen_ai.conversation.id"] == root["session.id"] == "s1"
    assert root["openinference.span.kind"] == "AGENT"
    assert root["gen_ai.usage.input_tokens"] == 120 + 300 + 420
    assert root["error.type"] == "_OTHER"

    first = dict(names["chat scripted-1"][0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "scripted-1"
    assert first["gen_ai.response.model"] == "scripted-1-2025"
    assert first["gen_ai.response.id"] == "resp_1"
    assert first["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 30)
    assert first["openinference.span.kind"] == "LLM"
    assert first["gen_ai.conversation.id"] == "s1"

    load = dict(names["execute_tool skills.load"][0].attributes or {})
    assert load["gen_ai.tool.name"] == "skills.load"
    assert load["gen_ai.tool.call.id"] == "call_1"
    assert load["gen_ai.tool.type"] == "function"
    assert load["openinference.span.kind"] == "TOOL"
    # pdf was activated and nope failed: two skills, so no single-skill attributes.
    assert load["skillog.skills"] == ("pdf", "nope")

    read = dict(names["execute_tool skills.read"][0].attributes or {})
    assert read["gen_ai.skill.name"] == "pdf"
    assert read["gen_ai.skill.hash"] == kit.PDF_HASH
    assert read["gen_ai.skill.source"] == "builtin"
    assert read["gen_ai.skill.trust_tier"] == "builtin"


async def test_failures_set_status_and_error_type(store: MemoryStore, kit: Any) -> None:
    names = _by_name(await _exported(store))
    script, denied = names["execute_tool skills.run_script"]
    assert script.status.status_code is StatusCode.ERROR
    assert dict(script.attributes or {})["error.type"] == "script_failed"
    assert dict(script.attributes or {})["process.exit.code"] == 3
    (executed,) = script.events
    assert executed.name == "skillog.script.executed"
    assert dict(executed.attributes or {})["process.exit.code"] == 3
    assert dict(executed.attributes or {})["skillog.script.outcome"] == "exit_nonzero"

    assert [e.name for e in denied.events] == [
        "skillog.approval.requested",
        "skillog.approval.resolved",
        "skillog.policy.denied",
    ]
    resolved = dict(denied.events[1].attributes or {})
    assert resolved == {
        "skillog.approval.approved": False,
        "skillog.approval.decided_by": "operator",
    }
    deny = dict(denied.events[2].attributes or {})
    assert deny["skillog.policy.rule"] == "approval"
    assert dict(denied.attributes or {})["gen_ai.skill.hash"] == kit.CSV_HASH

    failed = names["chat scripted-1"][3]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "no answer in 5 s"
    assert dict(failed.attributes or {})["error.type"] == "timeout"
    (retry,) = failed.events
    assert retry.name == "skillog.model.retry"
    assert dict(retry.attributes or {})["error.type"] == "rate_limited"
    ok = names["chat scripted-1"][0]
    assert ok.status.status_code is StatusCode.UNSET and "error.type" not in (ok.attributes or {})


async def test_skill_events_on_the_tool_span(store: MemoryStore, kit: Any) -> None:
    load = _by_name(await _exported(store))["execute_tool skills.load"][0]
    activated, failed = load.events
    assert activated.name == "gen_ai.skill.activated"
    assert dict(activated.attributes or {}) == {
        "gen_ai.skill.name": "pdf",
        "gen_ai.skill.hash": kit.PDF_HASH,
        "gen_ai.skill.source": "builtin",
        "gen_ai.skill.trust_tier": "builtin",
        "skillog.skill.mode": "add",
        "skillog.skill.trigger": "tool",
    }
    assert failed.name == "gen_ai.skill.activation_failed"
    assert dict(failed.attributes or {})["skillog.skill.failure"] == "not in the catalog"


CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


async def test_content_is_off_by_default(store: MemoryStore) -> None:
    for span in await _exported(store):
        assert not CONTENT_KEYS & set(span.attributes or {})
        text = json.dumps(dict(span.attributes or {}))
        assert "Summarize report.pdf" not in text and "boom" not in text


async def test_content_on_request_follows_the_conventions(store: MemoryStore, kit: Any) -> None:
    names = _by_name(await _exported(store, content=True))
    second = dict(names["chat scripted-1"][1].attributes or {})
    messages = json.loads(str(second["gen_ai.input.messages"]))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[0]["parts"] == [{"type": "text", "content": "Summarize report.pdf"}]
    call = messages[1]["parts"][1]
    assert call == {
        "type": "tool_call",
        "id": "call_1",
        "name": "skills.load",
        "arguments": {"names": ["pdf", "nope"]},
    }
    assert messages[2]["parts"][0]["type"] == "tool_call_response"
    assert json.loads(str(second["gen_ai.system_instructions"])) == [
        {"type": "text", "content": kit.SYSTEM}
    ]
    output = json.loads(str(second["gen_ai.output.messages"]))
    assert output[0]["role"] == "assistant" and output[0]["finish_reason"] == "tool_call"
    read = dict(names["execute_tool skills.read"][0].attributes or {})
    assert json.loads(str(read["gen_ai.tool.call.arguments"]))["path"] == "references/guide.md"
    assert read["gen_ai.tool.call.result"] == "# Guide\nUse extract.py."
    # The conventions record a result only for calls that succeeded.
    failed = dict(names["execute_tool skills.run_script"][0].attributes or {})
    assert "gen_ai.tool.call.result" not in failed


async def test_export_twice_gives_identical_spans(store: MemoryStore) -> None:
    def key(spans: list[ReadableSpan]) -> list[str]:
        return sorted(s.to_json() for s in spans)

    assert key(await _exported(store)) == key(await _exported(store))


async def test_unknown_event_types_are_skipped(kit: Any) -> None:
    events, blobs = kit.build_session()
    events.insert(3, NewEvent(type="future.thing", body=b"{}", recorded_at=events[2].recorded_at))
    store = MemoryStore()
    await store.append("s1", events, expected_seq=0, blobs=blobs)
    spans, _ = map_session([e async for e in store.read("s1")])
    assert len(spans) == 9


async def test_open_spans_are_closed_when_the_session_ends(kit: Any) -> None:
    # A session that ends while a tool call and a model call are still open.
    events, blobs = kit.build_session(end=False)
    cut = next(i for i, e in enumerate(events) if e.type == "tool.completed")
    events = events[:cut]
    from orchestrator._events import CODEC, SessionEnded

    events.append(
        CODEC.encode(
            SessionEnded(reason="cancelled", turns=1), recorded_at=events[-1].recorded_at + 5
        )
    )
    store = MemoryStore()
    await store.append("s1", events, expected_seq=0, blobs=blobs)
    spans, _ = map_session([e async for e in store.read("s1")])
    by_name = {s.name: s for s in spans}
    assert by_name["execute_tool skills.load"].attributes["error.type"] == "skillog.unfinished"
    assert by_name["invoke_agent demo-agent"].attributes["error.type"] == "cancelled"
    assert by_name["invoke_agent demo-agent"].end_ns == events[-1].recorded_at


async def test_two_sessions_get_different_traces(kit: Any) -> None:
    store = MemoryStore()
    await kit.append_session(store, "a")
    await kit.append_session(store, "b")  # identical bodies and times
    spans = await _exported(store)
    traces = {s.context.trace_id for s in spans if s.context}
    assert len(traces) == 2
    assert len({s.context.span_id for s in spans if s.context}) == len(spans)


def test_span_data_is_plain() -> None:
    # SpanData is msgspec-encodable: it can be logged or compared without the SDK.
    from otel import SpanData

    span = SpanData(
        name="x",
        trace_id=1,
        span_id=2,
        parent_span_id=None,
        kind="internal",
        start_ns=1,
        end_ns=2,
        attributes={"a": ("b",)},
    )
    assert msgspec.json.decode(msgspec.json.encode(span), type=SpanData) == span


async def test_write_ahead_events_map_to_spans() -> None:
    """A running script is a span event on its open tool span; an interrupted call's
    span ends in error; a suspension is an event on the root."""
    from orchestrator import Agent, HostTool, PolicyConfig
    from orchestrator._events import CODEC, SessionEnded, ToolInterrupted
    from orchestrator.adapters import ScriptedModel

    store = MemoryStore()

    def send() -> str:
        """Send."""
        return "sent"

    turns = [{"tool_calls": [{"id": "c1", "name": "send", "arguments": {}}]}, {"text": "ok"}]
    agent = Agent(
        model=ScriptedModel(turns),
        model_name="m",
        host_tools=[HostTool.from_function(send)],
        policy=PolicyConfig(approve_host_tools=("send",)),
    )
    session = await agent.run(store, "go", session_id="s9")
    assert session.state.status == "awaiting_approval"
    # The outcome a restart records for an at-most-once call that may have run.
    interrupted = ToolInterrupted(call_id="c1", tool="send", content="x")
    ended = SessionEnded(reason="cancelled", turns=1)
    await store.append(
        "s9",
        [CODEC.encode(b, recorded_at=2**62) for b in (interrupted, ended)],
        expected_seq=len(await _events(store, "s9")),
    )
    spans, _ = map_session(await _events(store, "s9"))
    root = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert "skillog.session.suspended" in [e.name for e in root.events]
    (tool,) = [s for s in spans if s.name == "execute_tool send"]
    assert tool.status == "error" and tool.attributes["error.type"] == "interrupted"


async def test_a_call_closed_before_its_intent_is_no_span_and_no_tool_call() -> None:
    """A cancel between the model's answer and a call's intent closes the call with
    no tool.called (orchestrator._cancel): it never ran, so it is not an execute_tool
    span nor counted in skillog.tool.calls; the root carries skillog.tool.not_run."""
    from pathlib import Path

    from eventlog import import_jsonl
    from orchestrator._cancel import record_cancel

    golden = MemoryStore()
    await import_jsonl(golden, str(Path(__file__).parents[1] / "golden" / "approvals.jsonl"))
    answered = (await _events(golden, "golden-approvals"))[:5]  # ends with model.responded
    assert answered[-1].type == "model.responded"
    store = MemoryStore()
    await store.append(
        "s1",
        [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in answered],
        expected_seq=0,
        blobs=[data async for _, data in golden.read_blobs()],
    )
    await record_cancel(store, "s1", by="sam", clock=lambda: answered[-1].recorded_at + 1)
    events = await _events(store)
    assert [e.type for e in events[5:]] == ["tool.completed", "session.ended"]
    spans, measurements = map_session(events)
    assert not [s for s in spans if s.name.startswith("execute_tool")]
    assert not [m for m in measurements if m.instrument == "skillog.tool.calls"]
    root = next(s for s in spans if s.name.startswith("invoke_agent"))
    (not_run,) = [e for e in root.events if e.name == "skillog.tool.not_run"]
    assert not_run.attributes == {
        "gen_ai.tool.name": "skills.load",
        "gen_ai.tool.call.id": "call_0_0",
    }
    assert root.attributes["error.type"] == "cancelled"
