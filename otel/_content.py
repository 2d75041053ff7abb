"""Message content in the shapes of the GenAI conventions' opt-in attributes.

Only used when content capture is switched on. Values are JSON strings, as the
conventions allow on spans while structured attribute values are not yet supported
(see gen-ai-spans.md, "Recording content on attributes"). Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from orchestrator import Message, ModelResponse, TextPart, ToolCall, ToolImage, ToolResult
from orchestrator.runtime import StopReason

#: skillog stop reasons -> the conventions' FinishReason values (output-messages schema).
FINISH_REASONS: dict[StopReason, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "refusal": "content_filter",
    "other": "other",
}

_encode = msgspec.json.Encoder().encode
_message_decoder = msgspec.json.Decoder(Message)
_tail_decoder = msgspec.json.Decoder(dict[str, Any])


def _json_or_text(text: str) -> Any:
    # The conventions expect arguments as an object; recorded text that is not JSON
    # (a model may emit anything) is kept as the string it was.
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _part(part: TextPart | ToolCall | ToolResult | ToolImage) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    if isinstance(part, ToolImage):
        # The bytes stay in the log's blob store; the part names the blob.
        return {
            "type": "file",
            "modality": "image",
            "mime_type": part.media_type,
            "file_id": f"sha256:{part.digest}",
        }
    if isinstance(part, ToolCall):
        return {
            "type": "tool_call",
            "id": part.id,
            "name": part.name,
            "arguments": _json_or_text(part.arguments),
        }
    return {"type": "tool_call_response", "id": part.call_id, "response": part.content}


def decode_message_blob(data: bytes) -> Message | None:
    """A history message from its blob (one canonical JSON line), or None if unreadable."""
    try:
        return _message_decoder.decode(data)
    except msgspec.MsgspecError:
        return None


def input_messages(messages: Sequence[Message]) -> str:
    """``gen_ai.input.messages``: the history sent to the model, in order."""
    return _encode(
        [{"role": m.role, "parts": [_part(p) for p in m.parts]} for m in messages]
    ).decode()


def system_instructions(tail_blob: bytes) -> str | None:
    """``gen_ai.system_instructions`` from a request's tail line, if it has a system text."""
    try:
        tail = _tail_decoder.decode(tail_blob)
    except msgspec.MsgspecError:
        return None
    system = tail.get("system")
    if not isinstance(system, str) or not system:
        return None
    return _encode([{"type": "text", "content": system}]).decode()


def output_messages(response: ModelResponse) -> str:
    """``gen_ai.output.messages``: the one choice the model returned."""
    return _encode(
        [
            {
                "role": "assistant",
                "parts": [_part(p) for p in response.parts],
                "finish_reason": FINISH_REASONS[response.stop_reason],
            }
        ]
    ).decode()
