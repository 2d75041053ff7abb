"""Offline export: read sessions from a log and send the same spans live mode sends.

Every session is verified (hash chain) before anything is sent; a broken chain stops
the export with nothing sent. Finished sessions are batched; after the exporter
accepts a batch, its sessions are recorded in the export state, so a failed or
interrupted export resumes with the first session not yet accepted. ``follow_export``
tails the log and exports each session when its ``session.ended`` commits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import trio
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter

from eventlog import Event, EventStore, split_type
from orchestrator import CODEC, PromptRendered, verdict
from orchestrator.runtime import is_session_stream

from ._errors import BrokenChainError, ExportFailedError, OtelError, SessionNotEndedError
from ._mapping import map_session
from ._otlp import diagnose, send
from ._sdk import default_resource, to_readables
from ._state import ExportState, save_state
from ._summary import SessionSummary, Summary, summarize, summarize_session

ENDED = "session.ended"


class ExportOptions(msgspec.Struct, kw_only=True):
    """How to export. ``retries`` extra attempts per batch, waiting ``backoff_s``,
    then twice as long each time; ``batch_spans`` spans per exporter call (at least one
    whole session); ``state_path`` where progress is saved (None: not saved);
    ``endpoint`` the exporter's URL, if any, to name the cause when sending fails."""

    content: bool = False
    retries: int = 3
    backoff_s: float = 0.5
    batch_spans: int = 512
    state_path: Path | None = None
    endpoint: str | None = None
    connect_timeout_s: float = 2.0


class ExportReport(msgspec.Struct, kw_only=True):
    """What an export did: sessions and spans sent, sessions skipped as already exported,
    and sessions left out because they have not ended."""

    sessions: int = 0
    spans: int = 0
    already_exported: int = 0
    open_sessions: list[str] = msgspec.field(default_factory=list)


async def _verified(store: EventStore, stream: str, refused: str) -> None:
    fault = (await verdict(store, stream)).fault
    if fault is not None:
        raise BrokenChainError(
            f"{fault}; the log does not verify, so {refused}. Run `skillog log verify` for "
            "details; restore the database from a backup, or export other sessions by name"
        )


async def _session_spans(
    store: EventStore, stream: str, resource: Resource, content: bool
) -> tuple[list[Event], list[ReadableSpan]]:
    events = [e async for e in store.read(stream)]
    blobs: dict[str, bytes] = {}
    if content:
        for e in events:
            if split_type(e.type)[0] == PromptRendered.event_type:
                body = CODEC.decode(e)
                assert isinstance(body, PromptRendered)
                for digest in (*body.new_message_digests, body.tail_digest):
                    if digest not in blobs and await store.has_blob(digest):
                        blobs[digest] = await store.get_blob(digest)
    spans, _ = map_session(events, content=content, blobs=blobs.get, metrics=False)
    return events, to_readables(spans, resource)


async def send_with_retries(
    exporter: SpanExporter, spans: Sequence[ReadableSpan], options: ExportOptions, what: str
) -> None:
    """Send one batch, retrying transient failures with exponential backoff;
    :class:`ExportFailedError` naming ``what`` and the last reason when every attempt
    failed. An endpoint that cannot be reached at all (connection refused, unknown
    host, no route within ``connect_timeout_s``) fails at once: retrying it would only
    wait (the SDK's exporter backs off for many seconds on each attempt)."""
    if options.endpoint is not None:
        cause = await trio.to_thread.run_sync(diagnose, options.endpoint, options.connect_timeout_s)
        if cause is not None:
            raise ExportFailedError(
                f"cannot send {what}: {cause}. Check that the collector is running and "
                "reachable at that address; run the command again to resume from this session"
            )
    reason = None
    for attempt in range(options.retries + 1):
        if attempt:
            await trio.sleep(options.backoff_s * 2 ** (attempt - 1))
        reason = await trio.to_thread.run_sync(send, exporter, spans)
        if reason is None:
            return
    if options.endpoint is not None:
        cause = await trio.to_thread.run_sync(diagnose, options.endpoint, options.connect_timeout_s)
        reason = cause or reason
    raise ExportFailedError(
        f"the exporter did not accept {what} ({len(spans)} spans) after "
        f"{options.retries + 1} attempts: {reason}. Check that the collector is running "
        "and reachable; run the command again to resume from this session"
    )


class _Batch:
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self.heads: dict[str, str] = {}


async def export_sessions(
    store: EventStore,
    exporter: SpanExporter,
    *,
    sessions: Sequence[str] | None = None,
    state: ExportState | None = None,
    options: ExportOptions | None = None,
    resource: Resource | None = None,
    progress: Callable[[int], None] | None = None,
) -> ExportReport:
    """Export the named ``sessions``, or (None) every finished session not yet exported;
    ``progress(1)`` after each session is read (exported, skipped or not ended).

    Named sessions must exist and have ended, and are sent even if exported before;
    with ``sessions=None`` unfinished sessions are listed in the report and skipped.
    Raises :class:`BrokenChainError` before sending anything if any selected session
    fails verification, and :class:`ExportFailedError` when a batch is refused after
    the retries (the batches before it are recorded in ``state``).
    """
    options = options or ExportOptions()
    state = state if state is not None else ExportState()
    resource = resource or default_resource()
    heads = {i.stream: i.head_hash for i in await store.streams() if is_session_stream(i.stream)}
    if sessions is None:
        selected = list(heads)
    else:
        selected = list(dict.fromkeys(sessions))
        missing = [s for s in selected if s not in heads]
        if missing:
            raise OtelError(
                f"no session {missing[0]!r} in the log; list them with `skillog sessions`"
            )
    for stream in selected:
        await _verified(store, stream, "nothing was exported")

    report = ExportReport()
    batch = _Batch()

    async def flush() -> None:
        if not batch.heads:
            return
        first = next(iter(batch.heads))
        what = f"session {first!r}" + (
            f" and {len(batch.heads) - 1} more" if len(batch.heads) > 1 else ""
        )
        await send_with_retries(exporter, batch.spans, options, what)
        state.exported.update(batch.heads)
        report.sessions += len(batch.heads)
        report.spans += len(batch.spans)
        if options.state_path is not None:
            await trio.to_thread.run_sync(save_state, options.state_path, state)
        batch.spans, batch.heads = [], {}

    for stream in selected:
        if progress is not None:
            progress(1)
        if sessions is None and state.exported.get(stream) == heads[stream]:
            report.already_exported += 1
            continue
        events, spans = await _session_spans(store, stream, resource, options.content)
        if not events or split_type(events[-1].type)[0] != ENDED:
            if sessions is not None:
                raise SessionNotEndedError(
                    f"session {stream!r} has not ended (its last event is "
                    f"{events[-1].type if events else 'missing'!r}); export it when it "
                    "ends, or run `skillog otel export --follow`"
                )
            report.open_sessions.append(stream)
            continue
        batch.spans += spans
        batch.heads[stream] = events[-1].hash
        if len(batch.spans) >= options.batch_spans:
            await flush()
    await flush()
    return report


async def follow_export(
    store: EventStore,
    exporter: SpanExporter,
    *,
    state: ExportState | None = None,
    options: ExportOptions | None = None,
    resource: Resource | None = None,
    on_export: Callable[[str, int], None] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Tail the log from ``state.position`` and export each session when it ends; runs
    until cancelled. Sessions already in ``state`` with the same head are skipped, so
    restarting after a failure or a stop resumes where it left off. ``on_export(session,
    spans)`` is called after each session is accepted."""
    options = options or ExportOptions()
    state = state if state is not None else ExportState()
    resource = resource or default_resource()
    task_status.started()
    async for event in store.follow(from_position=state.position):
        if split_type(event.type)[0] != ENDED:
            continue
        stream = event.stream
        if state.exported.get(stream) != event.hash:
            await _verified(store, stream, f"session {stream!r} was not exported")
            events, spans = await _session_spans(store, stream, resource, options.content)
            await send_with_retries(exporter, spans, options, f"session {stream!r}")
            state.exported[stream] = events[-1].hash
            if on_export is not None:
                on_export(stream, len(spans))
        state.position = event.position + 1
        if options.state_path is not None:
            await trio.to_thread.run_sync(save_state, options.state_path, state)


async def summarize_log(store: EventStore, sessions: Sequence[str] | None = None) -> Summary:
    """The metrics summary of the named sessions (None: all), from the verified log."""
    known = [info.stream for info in await store.streams() if is_session_stream(info.stream)]
    selected = known if sessions is None else list(dict.fromkeys(sessions))
    missing = [s for s in selected if s not in known]
    if missing:
        raise OtelError(f"no session {missing[0]!r} in the log; list them with `skillog sessions`")
    summaries: list[SessionSummary] = []
    for stream in selected:
        await _verified(store, stream, "nothing was exported")
        _, measurements = map_session([e async for e in store.read(stream)])
        summaries.append(summarize_session(stream, measurements))
    return summarize(summaries)
