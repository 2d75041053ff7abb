"""Offline export over real OTLP/HTTP to a receiver on loopback, and what happens when it fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from eventlog import MemoryStore
from otel import (
    BrokenChainError,
    ExportFailedError,
    ExportOptions,
    ExportState,
    OtelError,
    SessionNotEndedError,
    export_sessions,
    load_state,
    otlp_exporter,
    span_id_for,
    trace_id_for,
    traces_url,
)


def _exporter(url: str, timeout: float = 5.0) -> Any:
    return otlp_exporter(traces_url(url), timeout_s=timeout)


FAST = ExportOptions(retries=2, backoff_s=0.01)


async def test_spans_arrive_decoded_with_tree_ids_times_attributes(
    store: MemoryStore, receiver: Any
) -> None:
    events = [e async for e in store.read("s1")]
    exporter = _exporter(receiver.url)
    report = await export_sessions(store, exporter, options=FAST)
    exporter.shutdown()
    assert (report.sessions, report.spans) == (1, 9)
    assert receiver.paths == ["/v1/traces"]
    (request,) = receiver.requests
    resource = {
        kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "skillog"
    assert request.resource_spans[0].scope_spans[0].scope.name == "skillog.otel"

    spans = receiver.spans
    by_id = {int.from_bytes(s.span_id, "big"): s for s in spans}
    trace_id = trace_id_for("s1", events[0].hash).to_bytes(16, "big")
    assert {s.trace_id for s in spans} == {trace_id}
    root = by_id[span_id_for(events[0].hash)]
    assert root.name == "invoke_agent demo-agent" and root.parent_span_id == b""
    assert root.start_time_unix_nano == events[0].recorded_at
    assert root.end_time_unix_nano == events[-1].recorded_at
    assert root.status.code == 2  # STATUS_CODE_ERROR
    for span in spans:
        if span is not root:
            assert span.parent_span_id == root.span_id
    opening = {span_id_for(e.hash): e for e in events}
    for span_id, span in by_id.items():
        assert span.start_time_unix_nano == opening[span_id].recorded_at

    chats = [s for s in spans if s.name == "chat scripted-1"]
    assert len(chats) == 4 and {s.kind for s in chats} == {PbSpan.SPAN_KIND_CLIENT}
    attrs = receiver.attrs(chats[0])
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "skillog.scripted"
    assert attrs["gen_ai.usage.input_tokens"] == 120
    assert attrs["gen_ai.response.finish_reasons"] == ("tool_call",)
    (script, _) = [s for s in spans if s.name == "execute_tool skills.run_script"]
    assert receiver.attrs(script)["process.exit.code"] == 3
    assert script.events[0].name == "skillog.script.executed"
    assert script.events[0].time_unix_nano > script.start_time_unix_nano


async def test_two_exports_send_identical_spans(store: MemoryStore, receiver: Any) -> None:
    for _ in range(2):
        exporter = _exporter(receiver.url)
        await export_sessions(store, exporter, sessions=["s1"], options=FAST)
        exporter.shutdown()
    first, second = receiver.requests
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(
        deterministic=True
    )


async def test_a_refused_connection_fails_at_once_without_retries(
    store: MemoryStore, closed_port_url: str, autojump_clock: Any
) -> None:
    state = ExportState()
    exporter = _exporter(closed_port_url, timeout=0.5)
    options = ExportOptions(retries=2, backoff_s=0.5, endpoint=traces_url(closed_port_url))
    with pytest.raises(ExportFailedError) as info:
        await export_sessions(store, exporter, state=state, options=options)
    exporter.shutdown()
    message = str(info.value)
    assert "session 's1'" in message and "attempts" not in message
    assert "cannot connect to 127.0.0.1" in message and "refused" in message.lower()
    assert state.exported == {}


async def test_error_status_is_reported(store: MemoryStore, receiver: Any) -> None:
    receiver.status = 400
    exporter = _exporter(receiver.url)
    with pytest.raises(ExportFailedError, match="400"):
        await export_sessions(store, exporter, options=FAST)
    exporter.shutdown()
    assert receiver.attempts == 3  # one try and two retries, then it gives up


async def test_slow_endpoint_times_out_without_hanging(store: MemoryStore, receiver: Any) -> None:
    # Held until the exporter gave up: a fixed 1 s delay raced a loaded machine (the
    # request counted as accepted if the two 0.2 s attempts took over 1 s in all).
    receiver.hold = True
    exporter = _exporter(receiver.url, timeout=0.2)
    options = ExportOptions(retries=1, backoff_s=0.01)
    with trio.fail_after(30), pytest.raises(ExportFailedError, match="2 attempts"):
        await export_sessions(store, exporter, options=options)
    exporter.shutdown()
    assert receiver.requests == []
    receiver.released.set()


async def test_resume_after_partial_export(kit: Any, receiver: Any, tmp_path: Path) -> None:
    store = MemoryStore()
    for i, name in enumerate(["a", "b", "c"]):
        await kit.append_session(store, name, kit.T0 + i * 10**9)
    await kit.append_session(store, "open", kit.T0, end=False)
    state_path = tmp_path / "state.json"
    options = ExportOptions(retries=1, backoff_s=0.01, batch_spans=1, state_path=state_path)

    receiver.fail_after = 1  # accepts the first batch (session a), then answers 503
    # A short timeout: 503 is retryable, and the OTLP exporter's own backoff starts at 1 s.
    exporter = _exporter(receiver.url, timeout=0.3)
    with pytest.raises(ExportFailedError, match="session 'b'"):
        await export_sessions(store, exporter, state=load_state(state_path), options=options)
    assert set(load_state(state_path).exported) == {"a"}

    receiver.fail_after = None
    report = await export_sessions(store, exporter, state=load_state(state_path), options=options)
    exporter.shutdown()
    assert (report.sessions, report.already_exported, report.open_sessions) == (2, 1, ["open"])
    sessions = [
        {
            kv.value.string_value
            for s in r.resource_spans[0].scope_spans[0].spans
            for kv in s.attributes
            if kv.key == "session.id"
        }
        for r in receiver.requests
    ]
    assert sessions == [{"a"}, {"b"}, {"c"}]
    assert set(load_state(state_path).exported) == {"a", "b", "c"}


async def test_broken_chain_is_refused_before_anything_is_sent(
    store: MemoryStore, receiver: Any
) -> None:
    # Tamper with one stored event's body in place.
    events = store._streams["s1"]
    events[5] = type(events[5])(
        **{f: getattr(events[5], f) for f in events[5].__struct_fields__ if f != "body"},
        body=events[5].body.replace(b"skills.load", b"skills.evil"),
    )
    exporter = _exporter(receiver.url)
    with pytest.raises(BrokenChainError, match=r"stream 's1' seq 5: modified"):
        await export_sessions(store, exporter, options=FAST)
    exporter.shutdown()
    assert receiver.attempts == 0


async def test_a_named_session_must_exist_and_have_ended(kit: Any, receiver: Any) -> None:
    store = MemoryStore()
    await kit.append_session(store, "running", end=False)
    exporter = _exporter(receiver.url)
    with pytest.raises(SessionNotEndedError, match="'running' has not ended"):
        await export_sessions(store, exporter, sessions=["running"])
    with pytest.raises(OtelError, match="no session 'ghost'"):
        await export_sessions(store, exporter, sessions=["ghost"])
    exporter.shutdown()
    assert receiver.attempts == 0


def test_endpoint_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert traces_url(None) == "http://localhost:4318/v1/traces"
    assert traces_url("http://127.0.0.1:9/") == "http://127.0.0.1:9/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert traces_url(None) == "http://127.0.0.1:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/x")
    assert traces_url(None) == "http://127.0.0.1:1/x"
    for bad in ("localhost:4318", "ftp://127.0.0.1", "http://127.0.0.1:99999"):
        with pytest.raises(OtelError, match="endpoint"):
            traces_url(bad)
