"""The context budget: how big the next request is, and what compaction replaces.

Pure functions of the session state (docs/context.md). The runtime estimates the size
of the next request in tokens, and when it is over the policy's threshold it plans a
compaction: the :class:`~._events.Replacement` s of one ``context.compacted`` event.
The fold applies a recorded compaction with :func:`compacted`, so every later request
is rendered from the log alone, byte for byte, and replay never estimates anything.

The estimate is deterministic (no tokenizer whose version could change it): the
provider's reported usage of the last answered request (input plus output tokens) plus
a quarter of the bytes added to the history since (canonical JSON lines), plus a quarter
of the bytes of each skill body activated since. With no usage to start from (a model
that reports none, the first request, the first after a compaction) it is a quarter of
the canonical request's bytes. Four bytes a token is about right for English prose;
denser text is absorbed by the threshold's margin and, past it, the overflow path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import msgspec

from eventlog import SkillogError

from ._events import (
    ContextCompacted,
    ContextPolicy,
    Replacement,
    SessionStarted,
    SummaryRequested,
)
from ._model import (
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCall,
    ToolResult,
    encode_canonical,
)

BYTES_PER_TOKEN = 4
BYTES_ESTIMATOR = "bytes/4"
TIKTOKEN_ENCODING = "o200k_base"
Tokenizer = Literal["bytes", "tiktoken", "auto"]

CONTEXT_RULES = 1
"""The rules a new session estimates and compacts by, recorded in
``session.started.context_rules``; a session keeps the rules it started with, so a
re-drive decides as it did. 0: the first rules. 1: in instructions mode ``results`` the
estimate counts a newly loaded skill's instructions once (its load result), not also
as a system prompt block the composer leaves out."""

KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    # (model name prefix, context window in tokens); the longest matching prefix wins.
    ("claude-opus-4", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-haiku-4", 200_000),
    ("claude-3-7-sonnet", 200_000),
    ("claude-3-5-sonnet", 200_000),
    ("claude-3-5-haiku", 200_000),
    ("claude-3", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
)
"""The context windows of models skillog knows, by name prefix. Anything else is
unknown (0) unless configured (``Agent(context_window=...)``, ``--context-window``)."""

STUB_PREFIX = "[cleared to keep the context small: "


def context_window_for(model: str) -> int:
    """The known context window of ``model`` in tokens, 0 when unknown."""
    best = ("", 0)
    for prefix, window in KNOWN_WINDOWS:
        if model.startswith(prefix) and len(prefix) > len(best[0]):
            best = (prefix, window)
    return best[1]


def tokens_of(size: int) -> int:
    """The estimated tokens of ``size`` bytes of prompt (rounded up)."""
    return -(-size // BYTES_PER_TOKEN)


class EstimatorError(SkillogError):
    """The token estimator a session asks for cannot be loaded here."""


class Estimator:
    """Counts the tokens of prompt bytes, the one way a session records
    (``session.started.estimator``, docs/context.md): ``bytes/4`` (a quarter of the
    bytes, rounded up over the whole: no dependency, the same everywhere) or
    ``tiktoken:<encoding>`` (OpenAI's tokenizer, the optional extra
    ``skillog[tiktoken]``, its encoding loaded once)."""

    def __init__(self, name: str = BYTES_ESTIMATOR) -> None:
        self.name = name or BYTES_ESTIMATOR
        self._encode: Callable[[str], list[int]] | None = None
        if self.name != BYTES_ESTIMATOR:
            self._encode = _tiktoken(self.name)

    @property
    def exact_bytes(self) -> bool:
        """True for ``bytes/4``: a count is a function of the byte length alone."""
        return self._encode is None

    def tokens(self, chunks: Iterable[bytes]) -> int:
        if self._encode is None:
            return tokens_of(sum(len(c) for c in chunks))
        encode = self._encode
        return sum(len(encode(c.decode(errors="replace"))) for c in chunks)


def _tiktoken(name: str) -> Callable[[str], list[int]]:
    kind, _, encoding = name.partition(":")
    if kind != "tiktoken" or not encoding:
        raise EstimatorError(
            f"unknown token estimator {name!r}: use {BYTES_ESTIMATOR!r} or "
            f"'tiktoken:<encoding>' (e.g. 'tiktoken:{TIKTOKEN_ENCODING}')"
        )
    try:
        import tiktoken  # type: ignore[import-not-found, unused-ignore]

        enc = tiktoken.get_encoding(encoding)
    except Exception as e:  # not installed, unknown encoding, its file not fetchable
        raise EstimatorError(
            f"the token estimator {name!r} cannot be loaded here ({type(e).__name__}: {e}); "
            "install it with pip install 'skillog[tiktoken]' where its encoding files can "
            "be fetched or are cached, or use the bytes/4 estimator"
        ) from e

    def encode(text: str) -> list[int]:
        return list(enc.encode(text, disallowed_special=()))

    return encode


def choose_estimator(tokenizer: Tokenizer) -> str:
    """The estimator a new session records for the ``tokenizer`` option: ``bytes`` is
    ``bytes/4``; ``tiktoken`` must load (:class:`EstimatorError`); ``auto`` is tiktoken
    where it loads, else ``bytes/4``."""
    if tokenizer == "bytes":
        return BYTES_ESTIMATOR
    name = f"tiktoken:{TIKTOKEN_ENCODING}"
    try:
        Estimator(name)
    except EstimatorError:
        if tokenizer == "tiktoken":
            raise
        return BYTES_ESTIMATOR
    return name


def budget_of(window: int, reserve: int, policy: ContextPolicy) -> tuple[int, int]:
    """``(budget, threshold)``: the tokens a request may have (the window less the
    reserve for the answer) and the size over which the runtime compacts first."""
    budget = max(0, window - reserve)
    return budget, budget * policy.compact_at_percent // 100


def compacted(
    messages: Sequence[Message],
    replaced: Iterable[Replacement],
    dropped: int = 0,
    note: str = "",
) -> list[Message]:
    """``messages`` with each replaced tool result's content swapped for its stub, then
    the ``dropped`` messages after the first removed and ``note`` added to the first
    (the fold's half of ``context.compacted``). Replacing never changes calls, ids or
    order; dropping removes whole answered turns."""
    out = list(messages)
    by_message: dict[int, dict[str, str]] = {}
    for r in replaced:
        by_message.setdefault(r.message, {})[r.call_id] = r.stub
    for index, stubs in by_message.items():
        if not 0 <= index < len(out):
            continue
        message = out[index]
        out[index] = Message(
            role=message.role,
            parts=tuple(
                msgspec.structs.replace(p, content=stubs[p.call_id])
                if isinstance(p, ToolResult) and p.call_id in stubs
                else p
                for p in message.parts
            ),
        )
    if dropped and out:
        first = out[0]
        out[1 : 1 + dropped] = []
        out[0] = Message(role=first.role, parts=(*first.parts, TextPart(text=note)))
    return out


def plan_drop_turns(messages: Sequence[Message], keep_turns: int) -> tuple[int, str]:
    """Step 3 (without a model): ``(dropped, note)`` removing the older half of the
    whole turns between the first message and the last ``keep_turns`` turns (at least
    the last one); a user message ends what may be dropped. ``(0, "")`` when there is
    nothing to drop."""
    if len(messages) < 2 or messages[0].role != "user":
        return 0, ""
    ends: list[int] = []  # the index after each turn's tool message
    for i in range(1, len(messages)):
        role = messages[i].role
        if role == "user":
            break
        if role == "tool" and (i + 1 == len(messages) or messages[i + 1].role == "assistant"):
            ends.append(i + 1)
    tools = sum(1 for m in messages if m.role == "tool")
    droppable = ends[: max(0, len(ends) - max(1, keep_turns) - (tools - len(ends)))]
    if not droppable:
        return 0, ""
    cut = droppable[(len(droppable) - 1) // 2]
    turns = ends.index(cut) + 1
    note = (
        f"{STUB_PREFIX}{turns} earlier turn{'s' if turns != 1 else ''} ({cut - 1} messages) "
        "were removed here; read or run again what you still need]"
    )
    return cut - 1, note


Cleared = frozenset[tuple[int, str]]
"""The tool results already replaced, as (message index, call id): call ids are unique
within a response only, a model may use one again later."""


def plan_tool_results(
    messages: Sequence[Message],
    keep_turns: int,
    cleared: Cleared,
    active: Iterable[str] = (),
) -> tuple[Replacement, ...]:
    """Step 1: stubs for the tool results of every turn but the last ``keep_turns``
    (results already cleared, and those no longer than their stub, stay). ``active``
    (sessions in instructions mode ``results``): the skills whose ``skills.load``
    results carry instructions the model still follows, never cleared."""
    keep = frozenset(active)
    tool_messages = [i for i, m in enumerate(messages) if m.role == "tool"]
    old = tool_messages[: max(0, len(tool_messages) - keep_turns)]
    out: list[Replacement] = []
    for index in old:
        calls = _calls_before(messages, index)
        for part in messages[index].parts:
            if not isinstance(part, ToolResult) or (index, part.call_id) in cleared:
                continue
            call = calls.get(part.call_id)
            if _carries(part, call, keep):
                continue
            stub = _result_stub(part, call)
            if len(stub) < len(part.content):
                out.append(_replacement(index, part, call, stub))
    return tuple(out)


def plan_skill_instructions(
    messages: Sequence[Message], active: Iterable[str], cleared: Cleared
) -> tuple[Replacement, ...]:
    """Step 2: stubs for the ``skills.load`` results that carry the instructions of
    skills none of which is active any more (``instructions_in_results`` sessions)."""
    names = frozenset(active)
    out: list[Replacement] = []
    for index, message in enumerate(messages):
        if message.role != "tool":
            continue
        calls = _calls_before(messages, index)
        for part in message.parts:
            call = calls.get(part.call_id) if isinstance(part, ToolResult) else None
            if not isinstance(part, ToolResult) or (index, part.call_id) in cleared:
                continue
            if call is None:
                continue
            if call.name != "skills.load" or part.is_error:
                continue
            loaded = _instructions_of(part.content)
            if not loaded or names.intersection(loaded):
                continue
            stub = (
                f"{STUB_PREFIX}the instructions of {', '.join(loaded)}, no longer active; "
                "load them again with skills.load to use them]"
            )
            if len(stub) < len(part.content):
                out.append(_replacement(index, part, call, stub))
    return tuple(out)


Step = Literal["tool_results", "skill_instructions", "drop_turns"]
Reason = Literal["budget", "overflow"]
STEPS: tuple[Step, ...] = ("tool_results", "skill_instructions", "drop_turns")


RequestHash = Callable[[ModelRequest], str]


def plan_compaction(
    messages: Sequence[Message],
    cleared: set[tuple[int, str]],
    active: Sequence[str],
    config: SessionStarted,
    *,
    reason: Reason,
    tokens: int,
    tail: bytes,
    until: int | None,
    summarise: RequestHash | None = None,
    estimator: Estimator | None = None,
) -> list[ContextCompacted | SummaryRequested]:
    """The compaction steps, in order, each applied to the history the previous left,
    until the estimate is at most ``until`` (every step that changes anything when
    None). ``tokens`` is the estimate before; ``tail`` the request's tail line (system,
    tools), which compaction does not change; ``estimator`` counts (``bytes/4`` when
    None). Recorded together, so a
    process that stops never leaves half a compaction.

    With ``summarise`` (the summary calls are allowed and within their budget; it
    hashes a request), the turns step 3 would drop are to be summarised instead: the
    plan ends with the :class:`SummaryRequested` intent, whose answer the loop records
    with the ``summarise`` compaction (:func:`summary_compaction`)."""
    policy = config.policy.context
    budget, threshold = budget_of(config.context_window, config.max_tokens, policy)
    history, done = list(messages), set(cleared)
    events: list[ContextCompacted | SummaryRequested] = []

    count = estimator or Estimator()

    def size(after: Sequence[Message]) -> int:
        return count.tokens([*(encode_canonical(m) + b"\n" for m in after), tail])

    for step in STEPS:
        replaced: tuple[Replacement, ...] = ()
        dropped, note = 0, ""
        if step == "tool_results":
            # The results of the last keep_turns turns stay; when clearing the older
            # ones is not enough to fit, fewer, but never the last turn's (not read yet).
            kept = active if config.instructions_mode == "results" else ()
            for keep in range(max(1, policy.keep_turns), 0, -1):
                replaced = plan_tool_results(history, keep, frozenset(done), kept)
                after = size(compacted(history, replaced))
                if after <= threshold:
                    break
        elif step == "skill_instructions":
            replaced = plan_skill_instructions(history, active, frozenset(done))
        elif summarise is not None:
            dropped, _ = plan_drop_turns(history, policy.keep_turns)
            if dropped:
                request = summary_request(history, dropped, config)
                events.append(
                    SummaryRequested(
                        dropped=dropped,
                        request_hash=summarise(request),
                        reason=reason,
                        tokens_before=tokens,
                        budget=budget,
                        threshold=threshold,
                    )
                )
            break
        elif policy.drop_turns:
            dropped, note = plan_drop_turns(history, policy.keep_turns)
        if not replaced and not dropped:
            continue
        event = ContextCompacted(
            step=step,
            reason=reason,
            replaced=replaced,
            tokens_before=tokens,
            tokens_after=size(compacted(history, replaced, dropped, note)),
            budget=budget,
            threshold=threshold,
            dropped=dropped,
            note=note,
        )
        events.append(event)
        history, done = apply_compaction(history, done, event)
        tokens = event.tokens_after
        if until is not None and tokens <= until:
            break
    return events


SUMMARY_SYSTEM = (
    "You summarise the earlier part of an agent's session so that the agent can go on "
    "without it. Keep what the rest of the task needs: decisions made, facts found, "
    "files and paths read or written, commands run and their results, errors met, what "
    "is left to do. Leave out what no longer matters. Write plain prose, no preamble."
)
SUMMARY_MAX_TOKENS = 1024
SUMMARY_PREFIX = "[earlier turns summarised to keep the context small: "


def summary_request(
    messages: Sequence[Message], dropped: int, config: SessionStarted
) -> ModelRequest:
    """The request that summarises ``messages[1 : 1 + dropped]`` (pure: composed again
    from the log by a resumed process and by replay). The task (the first message,
    with any earlier summary) is shown for context; the turns as canonical JSON lines,
    as the history is hashed; no tools are offered."""
    first = "\n".join(p.text for p in messages[0].parts if isinstance(p, TextPart))
    turns = b"".join(encode_canonical(m) + b"\n" for m in messages[1 : 1 + dropped])
    text = (
        f"The task the agent was given:\n<task>\n{first}\n</task>\n\n"
        "The turns to summarise, one JSON message a line (the model's answers and tool "
        f"calls, the tools' results):\n<turns>\n{turns.decode()}</turns>\n\n"
        "Summarise these turns."
    )
    return ModelRequest(
        model=config.model,
        system=SUMMARY_SYSTEM,
        messages=(Message(role="user", parts=(TextPart(text=text),)),),
        tools=(),
        max_tokens=config.policy.context.summary_max_tokens or SUMMARY_MAX_TOKENS,
    )


def summary_compaction(
    messages: Sequence[Message],
    requested: SummaryRequested,
    response: ModelResponse | None,
    config: SessionStarted,
    *,
    tail: bytes,
    estimator: Estimator | None = None,
) -> ContextCompacted | None:
    """The compaction a summary's answer makes: ``summarise`` with the summary as the
    note on the first message, or, without a usable summary (the call failed, the text
    is empty), ``drop_turns`` when the policy allows it; None when it does not."""
    summary = response.text.strip() if response is not None else ""
    dropped = requested.dropped
    turns = sum(1 for m in messages[1 : 1 + dropped] if m.role == "assistant")
    if summary:
        step: Step | Literal["summarise"] = "summarise"
        note = (
            f"{SUMMARY_PREFIX}{turns} earlier turn{'s' if turns != 1 else ''} ({dropped} "
            f"messages) were replaced here by this summary; read or run again what you "
            f"still need]\n{summary}"
        )
    elif config.policy.context.drop_turns:
        step, note = "drop_turns", plan_drop_turns(messages, config.policy.context.keep_turns)[1]
    else:
        return None
    after = compacted(messages, (), dropped, note)
    count = estimator or Estimator()
    size = count.tokens([*(encode_canonical(m) + b"\n" for m in after), tail])
    return ContextCompacted(
        step=step,
        reason=requested.reason,
        replaced=(),
        tokens_before=requested.tokens_before,
        tokens_after=size,
        budget=requested.budget,
        threshold=requested.threshold,
        dropped=dropped,
        note=note,
        summary_digest=hashlib.sha256(summary.encode()).hexdigest() if summary else "",
    )


def apply_compaction(
    messages: Sequence[Message], cleared: set[tuple[int, str]], event: ContextCompacted
) -> tuple[list[Message], set[tuple[int, str]]]:
    """The history and the cleared results after ``event`` (the fold's step)."""
    history = compacted(messages, event.replaced, event.dropped, event.note)
    done = cleared | {(r.message, r.call_id) for r in event.replaced}
    if event.dropped:
        done = {(i - event.dropped, c) for i, c in done if i > event.dropped}
    return history, done


def _calls_before(messages: Sequence[Message], index: int) -> dict[str, ToolCall]:
    """The calls of the assistant message a tool message answers."""
    for message in reversed(messages[:index]):
        if message.role == "assistant":
            return {p.id: p for p in message.parts if isinstance(p, ToolCall)}
    return {}


def _result_stub(part: ToolResult, call: ToolCall | None) -> str:
    size = len(part.content.encode())
    if call is not None and call.name == "skills.read":
        return (
            f"{STUB_PREFIX}{size} bytes read by skills.read {call.arguments} are no longer "
            "shown; call skills.read with the same arguments again if you need them]"
        )
    tool = call.name if call is not None else "the tool"
    return f"{STUB_PREFIX}the {size}-byte result of {tool} is no longer shown]"


def _replacement(index: int, part: ToolResult, call: ToolCall | None, stub: str) -> Replacement:
    content = part.content.encode()
    return Replacement(
        message=index,
        call_id=part.call_id,
        tool=call.name if call is not None else "",
        digest=hashlib.sha256(content).hexdigest(),
        size=len(content),
        stub=stub,
    )


def shown_instructions(messages: Sequence[Message]) -> set[tuple[str, str]]:
    """The (skill name, instructions) pairs the history shows in ``skills.load``
    results that no compaction cleared (instructions mode ``results``: the composer
    puts an active skill in ``<active_skills>`` only when its exact instructions are
    not among them)."""
    shown: set[tuple[str, str]] = set()
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if message.role == "assistant":
            calls = {p.id: p for p in message.parts if isinstance(p, ToolCall)}
            continue
        if message.role != "tool":
            continue
        for part in message.parts:
            if not isinstance(part, ToolResult) or part.is_error:
                continue
            call = calls.get(part.call_id)
            if call is None or call.name != "skills.load" or '"instructions"' not in part.content:
                continue
            shown.update(_instructions(part.content).items())
    return shown


def _carries(part: ToolResult, call: ToolCall | None, names: frozenset[str]) -> bool:
    """``part`` is a ``skills.load`` result showing the instructions of one of ``names``."""
    if not names or call is None or call.name != "skills.load" or part.is_error:
        return False
    return bool(names.intersection(_instructions_of(part.content)))


def _instructions_of(content: str) -> tuple[str, ...]:
    return tuple(sorted(_instructions(content)))


def _instructions(content: str) -> dict[str, str]:
    try:
        receipt = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return {}
    instructions = receipt.get("instructions") if isinstance(receipt, dict) else None
    if not isinstance(instructions, dict):
        return {}
    return {k: v for k, v in instructions.items() if isinstance(k, str) and isinstance(v, str)}
