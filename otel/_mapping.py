"""The one mapping from a session's events to spans and measurements.

A session (one stream) becomes an ``invoke_agent {agent}`` root span; each model call
(``prompt.rendered`` to ``model.responded``/final ``model.failed``) a ``chat {model}``
child; each tool call (``tool.called`` to ``tool.completed``) an ``execute_tool {tool}``
child. Policy denials, approvals, skill activations, resource reads and script runs
become span events on the tool call they belong to (or the root). Times are the
events' ``recorded_at``; ids come from ``_ids``. Live export feeds events one at a
time, offline export a whole stream: both go through :class:`SessionMapper`, which
does no I/O and reads no clock, so both produce the same spans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from eventlog import Event, UnknownEventTypeError
from orchestrator import (
    CODEC,
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    CatalogSnapshot,
    Message,
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    ModelResponse,
    PolicyDenied,
    PromptRendered,
    ResourceRead,
    ScriptExecuted,
    ScriptStarted,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SessionSuspended,
    SkillActivated,
    SkillActivationFailed,
    SkillChanged,
    SkillDeactivated,
    SummaryAnswered,
    SummaryRequested,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
)

from . import _content
from . import _semconv as sc
from ._ids import span_id_for, trace_id_for
from ._spandata import Attributes, Measurement, SpanData, SpanEventData, SpanKindName

BlobLookup = Callable[[str], "bytes | None"]
"""Returns a blob's bytes by sha256 digest, or None when it is not available."""

#: error.type of spans still open when their session ends (or a newer one supersedes).
UNFINISHED = "skillog.unfinished"
MAX_PROGRESS_EVENTS = 100
"""Progress span events kept per tool span (the call's notes keep the last 100 too)."""


class _Open:
    """A span being built; frozen into :class:`SpanData` when its closing event arrives."""

    __slots__ = ("attributes", "events", "kind", "name", "skills", "span_id", "start_ns")

    def __init__(
        self, name: str, span_id: int, kind: SpanKindName, start_ns: int, attributes: Attributes
    ) -> None:
        self.name = name
        self.span_id = span_id
        self.kind: SpanKindName = kind
        self.start_ns = start_ns
        self.attributes = attributes
        self.events: list[SpanEventData] = []
        self.skills: list[str] = []


def _script_outcome(body: ScriptExecuted) -> str:
    if body.refused is not None:
        return "refused"
    if body.timed_out:
        return "timeout"
    if body.exit_code != 0:
        return "exit_nonzero"
    return "ok"


def _error_type(kind: str | None) -> str:
    return kind if kind and kind != "other" else sc.ERROR_OTHER


class SessionMapper:
    """Folds one session's events, in seq order, into finished spans and measurements.

    :meth:`feed` returns the spans that the event closed (children as their closing
    event arrives, the root at ``session.ended``) and the measurements it implies.
    Event types this code does not know are skipped, so a newer log still exports.
    With ``content=True`` the conventions' opt-in content attributes are added; the
    prompt history and system instructions come from blobs through ``blobs`` (missing
    blobs leave those attributes out). ``metrics=False`` skips the measurements.
    """

    def __init__(
        self, *, content: bool = False, blobs: BlobLookup | None = None, metrics: bool = True
    ) -> None:
        self.content = content
        self._metrics = metrics
        self._blobs = blobs
        self.stream: str | None = None
        self.trace_id = 0
        self.ended = False
        self.first_chunk_s: float | None = None
        """Live only: the time to the first streamed chunk of the response fed next
        (not in the log, so an offline export has no such attribute or measurement)."""
        self._root: _Open | None = None
        self._chat: _Open | None = None
        self._chat_failure: str | None = None
        self._summary: _Open | None = None  # a summary call under way (docs/context.md)
        self._tools: dict[str, _Open] = {}
        self._skills: dict[str, tuple[str, str, str]] = {}  # name -> (hash, source, tier)
        self._messages: list[Message | None] = []
        self._agent = ""
        self._provider = ""
        self._model = ""
        self._max_tokens = 0
        self._turns = 0
        self._input_tokens = 0
        self._output_tokens = 0
        self._spans: list[SpanData] = []
        self._measurements: list[Measurement] = []
        # Attribute dicts that repeat within a session, built once: templates for span
        # attributes (copied, as spans mutate theirs) and the measurements' attributes
        # (shared: measurements are never mutated). Cleared when what they hold changes.
        self._chat_template: Attributes | None = None
        self._model_metrics: dict[str, tuple[Attributes, Attributes, Attributes]] = {}
        self._tool_metrics: dict[tuple[str, str | None], Attributes] = {}
        self._skill_templates: dict[str, Attributes] = {}
        self._skill_metrics: dict[str, Attributes] = {}

    # -- driving ---------------------------------------------------------------------

    def feed(self, event: Event) -> tuple[list[SpanData], list[Measurement]]:
        """Apply the next event of the session; the spans it finished and its measurements."""
        if self._root is None:
            self._open_root(event)
        if event.type.partition("@")[0] not in _HANDLED:
            return [], []  # nothing maps it (a user message, a type from a newer skillog)
        try:
            body = CODEC.decode(event)
        except UnknownEventTypeError:
            return [], []
        handler = _HANDLERS.get(type(body))
        if handler is not None:
            handler(self, body, event)
        spans, self._spans = self._spans, []
        measurements, self._measurements = self._measurements, []
        return spans, measurements

    def _open_root(self, event: Event) -> None:
        self.stream = event.stream
        self.trace_id = trace_id_for(event.stream, event.hash)
        self._root = _Open(
            "invoke_agent",
            span_id_for(event.hash),
            "internal",
            event.recorded_at,
            {
                sc.OPERATION: "invoke_agent",
                sc.CONVERSATION_ID: event.stream,
                sc.SESSION_ID: event.stream,
                sc.OI_KIND: "AGENT",
            },
        )

    def _close(
        self,
        span: _Open,
        end_ns: int,
        parent: int | None,
        error: str | None = None,
        description: str | None = None,
    ) -> None:
        if error is not None:
            span.attributes[sc.ERROR_TYPE] = error
        self._spans.append(
            SpanData(
                name=span.name,
                trace_id=self.trace_id,
                span_id=span.span_id,
                parent_span_id=parent,
                kind=span.kind,
                start_ns=span.start_ns,
                end_ns=max(end_ns, span.start_ns),
                attributes=span.attributes,
                events=tuple(span.events),
                status="error" if error is not None else "unset",
                status_description=description if error is not None else None,
            )
        )

    def _root_id(self) -> int:
        assert self._root is not None
        return self._root.span_id

    def _target(self, call_id: str | None) -> _Open:
        """The span an annotation belongs to: its tool call's, else the root."""
        if call_id is not None and call_id in self._tools:
            return self._tools[call_id]
        assert self._root is not None
        return self._root

    def _annotate(
        self,
        call_id: str | None,
        name: str,
        event: Event,
        attributes: Attributes,
        skill: str | None = None,
    ) -> _Open:
        """Add a span event to the call's span (else the root); ``skill`` is one the call
        acted on, so a call touching exactly one skill carries its attributes."""
        target = self._target(call_id)
        target.events.append(
            SpanEventData(name=name, time_ns=event.recorded_at, attributes=attributes)
        )
        if skill is not None and target is not self._root and skill not in target.skills:
            target.skills.append(skill)
        return target

    def _measure(self, instrument: str, value: int | float, attributes: Attributes) -> None:
        if not self._metrics:
            return
        self._measurements.append(
            Measurement(instrument=instrument, value=value, attributes=attributes)
        )

    def _skill_attrs(self, name: str) -> Attributes:
        """A new dict of the skill's attributes (callers add to it)."""
        template = self._skill_templates.get(name)
        if template is None:
            template = {sc.SKILL_NAME: name}
            known = self._skills.get(name)
            if known is not None:
                (
                    template[sc.SKILL_HASH],
                    template[sc.SKILL_SOURCE],
                    template[sc.SKILL_TRUST_TIER],
                ) = known
            self._skill_templates[name] = template
        return template.copy()

    def _know_skill(self, name: str, info: tuple[str, str, str]) -> None:
        if self._skills.get(name) != info:
            self._skills[name] = info
            self._skill_templates.pop(name, None)

    def _skill_metric(self, name: str) -> Attributes:
        attrs = self._skill_metrics.get(name)
        if attrs is None:
            attrs = self._skill_metrics[name] = {sc.SKILL_NAME: name}
        return attrs

    # -- session ---------------------------------------------------------------------

    def _session_started(self, body: SessionStarted, event: Event) -> None:
        assert self._root is not None
        self._agent, self._provider, self._model = body.agent, body.provider, body.model
        self._max_tokens = body.max_tokens
        self._chat_template = None
        self._model_metrics.clear()
        self._root.name = f"invoke_agent {body.agent}" if body.agent else "invoke_agent"
        attrs = self._root.attributes
        attrs[sc.AGENT_NAME] = body.agent
        attrs[sc.PROVIDER] = body.provider
        attrs[sc.REQUEST_MODEL] = body.model
        attrs[sc.REQUEST_MAX_TOKENS] = body.max_tokens
        if body.version:
            attrs["skillog.version"] = body.version

    def _session_forked(self, body: SessionForked, event: Event) -> None:
        assert self._root is not None
        self._root.attributes["skillog.session.forked_from"] = body.from_session
        self._root.attributes["skillog.session.forked_at_seq"] = body.at_seq

    def _catalog(self, body: CatalogSnapshot, event: Event) -> None:
        for skill in body.skills:
            self._know_skill(skill.name, (skill.hash, skill.source, skill.tier))
        self._annotate(
            None,
            "skillog.catalog.snapshot",
            event,
            {
                "skillog.catalog.skills": tuple(s.name for s in body.skills),
                "skillog.catalog.hidden": len(body.hidden),
            },
        )

    def _skill_changed(self, body: SkillChanged, event: Event) -> None:
        if body.skill is not None:
            self._know_skill(body.name, (body.skill.hash, body.skill.source, body.skill.tier))
        attrs: Attributes = {sc.SKILL_NAME: body.name}
        if body.old_hash:
            attrs["skillog.skill.old_hash"] = body.old_hash
        if body.new_hash:
            attrs["skillog.skill.new_hash"] = body.new_hash
        self._annotate(None, "skillog.skill.changed", event, attrs)

    def _session_ended(self, body: SessionEnded, event: Event) -> None:
        root = self._root
        assert root is not None
        end = event.recorded_at
        for call_id in list(self._tools):
            self._close(self._tools.pop(call_id), end, root.span_id, UNFINISHED)
        if self._chat is not None:
            self._close(self._chat, end, root.span_id, self._chat_failure or UNFINISHED)
            self._chat = None
        attrs = root.attributes
        attrs["skillog.session.end_reason"] = body.reason
        attrs["skillog.session.turns"] = body.turns
        attrs[sc.INPUT_TOKENS] = self._input_tokens
        attrs[sc.OUTPUT_TOKENS] = self._output_tokens
        error = {"error": sc.ERROR_OTHER, "cancelled": "cancelled"}.get(body.reason)
        self._close(root, end, None, error, body.error)
        self.ended = True
        common: Attributes = {sc.AGENT_NAME: self._agent, "skillog.session.end_reason": body.reason}
        self._measure(sc.M_SESSION_DURATION, (end - root.start_ns) / 1e9, common)
        self._measure(sc.M_SESSION_TURNS, body.turns, {sc.AGENT_NAME: self._agent})

    # -- model calls -----------------------------------------------------------------

    def _model_attrs(self) -> Attributes:
        return {
            sc.OPERATION: "chat",
            sc.PROVIDER: self._provider,
            sc.REQUEST_MODEL: self._model,
        }

    def _prompt_rendered(self, body: PromptRendered, event: Event) -> None:
        if self._chat is not None:  # a new request before the last one finished
            self._close(
                self._chat, event.recorded_at, self._root_id(), self._chat_failure or UNFINISHED
            )
        self._turns = max(self._turns, body.turn)
        template = self._chat_template
        if template is None:
            stream = self.stream or ""
            template = self._chat_template = {
                **self._model_attrs(),
                sc.CONVERSATION_ID: stream,
                sc.SESSION_ID: stream,
                sc.REQUEST_MAX_TOKENS: self._max_tokens,
                sc.OI_KIND: "LLM",
                sc.OI_MODEL: self._model,
            }
        attrs = template.copy()
        attrs["skillog.turn"] = body.turn
        attrs["skillog.request_hash"] = body.request_hash
        if self.content:
            self._add_prompt_content(body, attrs)
        self._chat = _Open(
            f"chat {self._model}" if self._model else "chat",
            span_id_for(event.hash),
            "client",
            event.recorded_at,
            attrs,
        )
        self._chat_failure = None

    def _blob(self, digest: str) -> bytes | None:
        return self._blobs(digest) if self._blobs is not None else None

    def _add_prompt_content(self, body: PromptRendered, attrs: Attributes) -> None:
        # After a compaction the prompt names the history again from the first message
        # it rewrote (docs/context.md): keep only what comes before the new ones.
        del self._messages[max(0, body.message_count - len(body.new_message_digests)) :]
        for digest in body.new_message_digests:
            data = self._blob(digest)
            self._messages.append(None if data is None else _content.decode_message_blob(data))
        history = self._messages[: body.message_count]
        if len(history) == body.message_count and all(m is not None for m in history):
            attrs[sc.INPUT_MESSAGES] = _content.input_messages([m for m in history if m])
        tail = self._blob(body.tail_digest)
        system = _content.system_instructions(tail) if tail is not None else None
        if system is not None:
            attrs[sc.SYSTEM_INSTRUCTIONS] = system

    def _count(
        self, response: ModelResponse, duration_ms: int, first_chunk: float | None = None
    ) -> None:
        """A model call's tokens in the session's totals, and its duration and usage
        metrics (a turn's call or a summary's)."""
        usage = response.usage
        self._input_tokens += usage.input_tokens
        self._output_tokens += usage.output_tokens
        if self._metrics:
            metric, input_, output = self._response_metrics(response.model)
            self._measure(sc.M_OPERATION_DURATION, duration_ms / 1000, metric)
            if first_chunk is not None:
                self._measure(sc.M_TIME_TO_FIRST_CHUNK, first_chunk, metric)
            self._measure(sc.M_TOKEN_USAGE, usage.input_tokens, input_)
            self._measure(sc.M_TOKEN_USAGE, usage.output_tokens, output)

    def _model_responded(self, body: ModelResponded, event: Event) -> None:
        response = body.response
        usage = response.usage
        first_chunk, self.first_chunk_s = self.first_chunk_s, None
        self._count(response, body.duration_ms, first_chunk)
        chat, self._chat = self._chat, None
        if chat is None:
            return
        attrs = chat.attributes
        if response.model:
            attrs[sc.RESPONSE_MODEL] = response.model
        if response.id:
            attrs[sc.RESPONSE_ID] = response.id
        attrs[sc.FINISH_REASONS] = (_content.FINISH_REASONS[response.stop_reason],)
        if first_chunk is not None:
            attrs[sc.TIME_TO_FIRST_CHUNK] = first_chunk
        attrs[sc.INPUT_TOKENS] = usage.input_tokens
        attrs[sc.OUTPUT_TOKENS] = usage.output_tokens
        if usage.cache_read_input_tokens:
            attrs[sc.CACHE_READ_TOKENS] = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens:
            attrs[sc.CACHE_CREATION_TOKENS] = usage.cache_creation_input_tokens
        attrs[sc.OI_PROMPT_TOKENS] = usage.input_tokens
        attrs[sc.OI_COMPLETION_TOKENS] = usage.output_tokens
        if self.content:
            attrs[sc.OUTPUT_MESSAGES] = _content.output_messages(response)
        self._close(chat, event.recorded_at, self._root_id())

    def _response_metrics(self, model: str) -> tuple[Attributes, Attributes, Attributes]:
        """Attributes of a response's duration and of its input and output token usage."""
        cached = self._model_metrics.get(model)
        if cached is None:
            metric = self._model_attrs()
            if model:
                metric[sc.RESPONSE_MODEL] = model
            cached = (
                metric,
                {**metric, sc.TOKEN_TYPE: "input"},
                {**metric, sc.TOKEN_TYPE: "output"},
            )
            self._model_metrics[model] = cached
        return cached

    def _model_interrupted(self, body: ModelInterrupted, event: Event) -> None:
        # The call was cancelled; the request is sent again after a resume, and the
        # chat span stays open until its answer.
        if self._chat is not None:
            attrs: Attributes = {
                "skillog.model.attempt": body.attempt,
                "skillog.model.text_size": body.text_size,
            }
            self._chat.events.append(
                SpanEventData(
                    name="skillog.model.interrupted", time_ns=event.recorded_at, attributes=attrs
                )
            )

    def _summary_requested(self, body: SummaryRequested, event: Event) -> None:
        stream = self.stream or ""
        attrs: Attributes = {
            **self._model_attrs(),
            sc.CONVERSATION_ID: stream,
            sc.SESSION_ID: stream,
            sc.OI_KIND: "LLM",
            sc.OI_MODEL: self._model,
            "skillog.summary.messages": body.dropped,
            "skillog.request_hash": body.request_hash,
        }
        name = f"chat {self._model}" if self._model else "chat"
        self._summary = _Open(name, span_id_for(event.hash), "client", event.recorded_at, attrs)

    def _summary_answered(self, body: SummaryAnswered, event: Event) -> None:
        span, self._summary = self._summary, None
        response = body.response
        if response is not None:
            self._count(response, body.duration_ms)
        if span is None:
            return
        if response is None:
            self._close(span, event.recorded_at, self._root_id(), "summary_failed", body.error)
            return
        span.attributes[sc.INPUT_TOKENS] = response.usage.input_tokens
        span.attributes[sc.OUTPUT_TOKENS] = response.usage.output_tokens
        self._close(span, event.recorded_at, self._root_id())

    def _model_failed(self, body: ModelFailed, event: Event) -> None:
        error = _error_type(body.kind)
        self._measure(
            sc.M_OPERATION_DURATION,
            body.duration_ms / 1000,
            {**self._model_attrs(), sc.ERROR_TYPE: error},
        )
        chat = self._chat
        if chat is None:
            return
        if body.will_retry:
            attrs: Attributes = {
                sc.ERROR_TYPE: error,
                "skillog.model.attempt": body.attempt,
                "exception.message": body.message,
            }
            if body.retry_after_ms is not None:
                attrs["skillog.model.retry_after_ms"] = body.retry_after_ms
            chat.events.append(
                SpanEventData(
                    name="skillog.model.retry", time_ns=event.recorded_at, attributes=attrs
                )
            )
            self._chat_failure = error
            return
        self._chat = None
        chat.attributes["skillog.model.attempt"] = body.attempt
        self._close(chat, event.recorded_at, self._root_id(), error, body.message)

    # -- tool calls ------------------------------------------------------------------

    def _tool_called(self, body: ToolCalled, event: Event) -> None:
        stream = self.stream or ""
        attrs: Attributes = {
            sc.OPERATION: "execute_tool",
            sc.TOOL_NAME: body.tool,
            sc.TOOL_CALL_ID: body.call_id,
            # The model chooses the arguments and skillog (the client) runs the tool.
            sc.TOOL_TYPE: "function",
            sc.OI_KIND: "TOOL",
            sc.OI_TOOL_NAME: body.tool,
            "skillog.turn": body.turn,
            sc.CONVERSATION_ID: stream,
            sc.SESSION_ID: stream,
        }
        if body.skills:
            attrs["skillog.active_skills"] = tuple(body.skills)
        if self.content:
            attrs[sc.TOOL_CALL_ARGUMENTS] = body.arguments
        previous = self._tools.pop(body.call_id, None)
        if previous is not None:  # a repeated call id: close the first rather than lose it
            self._close(previous, event.recorded_at, self._root_id(), UNFINISHED)
        self._tools[body.call_id] = _Open(
            f"execute_tool {body.tool}",
            span_id_for(event.hash),
            "internal",
            event.recorded_at,
            attrs,
        )

    def progress(
        self,
        call_id: str,
        time_ns: int,
        *,
        server: str,
        progress: str,
        total: str | None,
        message: str,
    ) -> bool:
        """Live only: an MCP progress notification as a ``skillog.mcp.progress`` span
        event on the open span of tool call ``call_id`` (at most
        :data:`MAX_PROGRESS_EVENTS` per span; the message only with ``content``). The
        log holds no progress tick, so an offline export has none. False when the call
        is not open (ended, or not seen yet)."""
        span = self._tools.get(call_id)
        if span is None:
            return False
        if sum(e.name == "skillog.mcp.progress" for e in span.events) >= MAX_PROGRESS_EVENTS:
            return False
        attrs: Attributes = {"skillog.mcp.server": server, "skillog.mcp.progress": progress}
        if total is not None:
            attrs["skillog.mcp.total"] = total
        if message and self.content:
            attrs["skillog.mcp.message"] = message
        span.events.append(
            SpanEventData(name="skillog.mcp.progress", time_ns=time_ns, attributes=attrs)
        )
        return True

    def _tool_completed(self, body: ToolCompleted, event: Event) -> None:
        span = self._tools.pop(body.call_id, None)
        if span is None:
            # No tool.called: a cancel closed the call between the model's answer and
            # its intent (orchestrator._cancel). It never ran: no execute_tool span, no
            # tool call counted; the root notes what the model asked for.
            attrs: Attributes = {sc.TOOL_NAME: body.tool, sc.TOOL_CALL_ID: body.call_id}
            self._annotate(None, "skillog.tool.not_run", event, attrs)
            return
        error = _error_type(body.error_type) if body.is_error else None
        if self._metrics:
            metric = self._tool_metrics.get((body.tool, error))
            if metric is None:
                metric = {sc.TOOL_NAME: body.tool}
                if error is not None:
                    metric[sc.ERROR_TYPE] = error
                self._tool_metrics[body.tool, error] = metric
            self._measure(sc.M_TOOL_CALLS, 1, metric)
        if len(span.skills) == 1:
            span.attributes.update(self._skill_attrs(span.skills[0]))
        elif span.skills:
            span.attributes["skillog.skills"] = tuple(span.skills)
        if self.content and not body.is_error:
            span.attributes[sc.TOOL_CALL_RESULT] = body.content
        description = body.content[:256] if body.is_error else None
        self._close(span, event.recorded_at, self._root_id(), error, description)

    def _tool_interrupted(self, body: ToolInterrupted, event: Event) -> None:
        """An at-most-once call resolved after a restart: its span ends in error."""
        if self._metrics:
            self._measure(
                sc.M_TOOL_CALLS, 1, {sc.TOOL_NAME: body.tool, sc.ERROR_TYPE: "interrupted"}
            )
        span = self._tools.pop(body.call_id, None)
        if span is not None:
            self._close(span, event.recorded_at, self._root_id(), "interrupted", body.content)

    def _script_started(self, body: ScriptStarted, event: Event) -> None:
        """A span event on the (still open) tool span: live export shows the script
        running before it ends."""
        attrs = self._skill_attrs(body.skill)
        attrs["skillog.script.path"] = body.path
        attrs["skillog.script.sandbox"] = body.sandbox
        attrs["skillog.script.network"] = body.network
        attrs["skillog.script.timeout_ms"] = body.timeout_ms
        self._annotate(body.call_id, "skillog.script.started", event, attrs, skill=body.skill)

    def _session_suspended(self, body: SessionSuspended, event: Event) -> None:
        self._annotate(
            None,
            "skillog.session.suspended",
            event,
            {"skillog.suspended.reason": body.reason, "skillog.suspended.calls": body.call_ids},
        )

    def _policy_denied(self, body: PolicyDenied, event: Event) -> None:
        attrs: Attributes = {
            "skillog.policy.rule": body.rule,
            "skillog.policy.reason": body.reason,
            sc.TOOL_NAME: body.tool,
        }
        metric: Attributes = {"skillog.policy.rule": body.rule, sc.TOOL_NAME: body.tool}
        if body.skill is not None:
            attrs[sc.SKILL_NAME] = metric[sc.SKILL_NAME] = body.skill
        self._annotate(body.call_id, "skillog.policy.denied", event, attrs, skill=body.skill)
        self._measure(sc.M_POLICY_DENIALS, 1, metric)

    def _approval_requested(self, body: ApprovalRequested, event: Event) -> None:
        attrs: Attributes = {"skillog.approval.action": body.action, sc.TOOL_NAME: body.tool}
        if body.skill is not None:
            attrs[sc.SKILL_NAME] = body.skill
        if body.tier is not None:
            attrs[sc.SKILL_TRUST_TIER] = body.tier
        self._annotate(body.call_id, "skillog.approval.requested", event, attrs)

    def _approval_resolved(self, body: ApprovalResolved, event: Event) -> None:
        self._annotate(
            body.call_id,
            "skillog.approval.resolved",
            event,
            {
                "skillog.approval.approved": body.approved,
                "skillog.approval.decided_by": body.decided_by,
            },
        )

    def _approval_remembered(self, body: ApprovalRemembered, event: Event) -> None:
        attrs: Attributes = {
            "skillog.approval.remember": body.scope,
            "skillog.approval.decided_by": body.decided_by,
        }
        if body.pattern is not None:
            attrs["skillog.approval.pattern"] = body.pattern
        self._annotate(body.call_id, "skillog.approval.remembered", event, attrs)

    # -- skills ----------------------------------------------------------------------

    def _skill_activated(self, body: SkillActivated, event: Event) -> None:
        self._know_skill(body.name, (body.hash, body.source, body.tier))
        attrs = self._skill_attrs(body.name)
        attrs["skillog.skill.mode"] = body.mode
        attrs["skillog.skill.trigger"] = body.trigger
        self._annotate(body.call_id, "gen_ai.skill.activated", event, attrs, skill=body.name)
        self._measure(
            sc.M_ACTIVATIONS,
            1,
            {
                sc.SKILL_NAME: body.name,
                sc.SKILL_TRUST_TIER: body.tier,
                "skillog.skill.trigger": body.trigger,
            },
        )

    def _skill_deactivated(self, body: SkillDeactivated, event: Event) -> None:
        attrs = self._skill_attrs(body.name)
        attrs["skillog.skill.reason"] = body.reason
        self._annotate(body.call_id, "gen_ai.skill.deactivated", event, attrs)

    def _activation_failed(self, body: SkillActivationFailed, event: Event) -> None:
        attrs = self._skill_attrs(body.name)
        attrs["skillog.skill.failure"] = body.reason
        self._annotate(
            body.call_id, "gen_ai.skill.activation_failed", event, attrs, skill=body.name
        )
        self._measure(sc.M_ACTIVATION_FAILURES, 1, self._skill_metric(body.name))

    def _resource_read(self, body: ResourceRead, event: Event) -> None:
        attrs = self._skill_attrs(body.skill)
        attrs["skillog.resource.path"] = body.path
        attrs["skillog.resource.size"] = body.size
        attrs["skillog.resource.digest"] = body.digest
        self._annotate(body.call_id, "skillog.resource.read", event, attrs, skill=body.skill)
        self._measure(sc.M_RESOURCE_READS, 1, self._skill_metric(body.skill))

    def _script_executed(self, body: ScriptExecuted, event: Event) -> None:
        outcome = _script_outcome(body)
        attrs = self._skill_attrs(body.skill)
        attrs["skillog.script.path"] = body.path
        attrs["skillog.script.outcome"] = outcome
        attrs["skillog.script.duration_ms"] = body.duration_ms
        attrs["skillog.script.sandbox"] = body.sandbox
        attrs["skillog.script.network"] = body.network
        attrs["skillog.script.truncated"] = body.truncated
        if body.exit_code is not None:
            attrs[sc.PROCESS_EXIT_CODE] = body.exit_code
        if body.refused is not None:
            attrs["skillog.script.refused"] = body.refused
        span = self._annotate(
            body.call_id, "skillog.script.executed", event, attrs, skill=body.skill
        )
        if span is not self._root:
            if body.exit_code is not None:
                span.attributes[sc.PROCESS_EXIT_CODE] = body.exit_code
            span.attributes["skillog.script.outcome"] = outcome
        metric: Attributes = {sc.SKILL_NAME: body.skill, "skillog.script.outcome": outcome}
        self._measure(sc.M_SCRIPT_RUNS, 1, metric)
        if outcome != "ok":
            self._measure(sc.M_SCRIPT_FAILURES, 1, metric)
        if body.refused is None:
            self._measure(sc.M_SCRIPT_DURATION, body.duration_ms / 1000, metric)


_HANDLERS: dict[type[Any], Callable[[SessionMapper, Any, Event], None]] = {
    SessionStarted: SessionMapper._session_started,
    SessionForked: SessionMapper._session_forked,
    CatalogSnapshot: SessionMapper._catalog,
    PromptRendered: SessionMapper._prompt_rendered,
    ModelResponded: SessionMapper._model_responded,
    ModelFailed: SessionMapper._model_failed,
    ModelInterrupted: SessionMapper._model_interrupted,
    SummaryRequested: SessionMapper._summary_requested,
    SummaryAnswered: SessionMapper._summary_answered,
    ToolCalled: SessionMapper._tool_called,
    ToolCompleted: SessionMapper._tool_completed,
    ToolInterrupted: SessionMapper._tool_interrupted,
    ScriptStarted: SessionMapper._script_started,
    SessionSuspended: SessionMapper._session_suspended,
    PolicyDenied: SessionMapper._policy_denied,
    ApprovalRequested: SessionMapper._approval_requested,
    ApprovalResolved: SessionMapper._approval_resolved,
    ApprovalRemembered: SessionMapper._approval_remembered,
    SkillActivated: SessionMapper._skill_activated,
    SkillDeactivated: SessionMapper._skill_deactivated,
    SkillActivationFailed: SessionMapper._activation_failed,
    ResourceRead: SessionMapper._resource_read,
    ScriptExecuted: SessionMapper._script_executed,
    SkillChanged: SessionMapper._skill_changed,
    SessionEnded: SessionMapper._session_ended,
}
"""Which method folds each event body type; other types produce nothing."""

#: Type tags (without schema version) that some handler maps; others are skipped undecoded.
_HANDLED = frozenset(CODEC.type_of(cls).partition("@")[0] for cls in _HANDLERS)


def map_session(
    events: Iterable[Event],
    *,
    content: bool = False,
    blobs: BlobLookup | None = None,
    metrics: bool = True,
) -> tuple[list[SpanData], list[Measurement]]:
    """All spans and measurements of one session's events (in seq order). Pure."""
    mapper = SessionMapper(content=content, blobs=blobs, metrics=metrics)
    spans: list[SpanData] = []
    measurements: list[Measurement] = []
    for event in events:
        s, m = mapper.feed(event)
        spans += s
        measurements += m
    return spans, measurements
