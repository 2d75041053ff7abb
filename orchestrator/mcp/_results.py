"""What an MCP tool result becomes: the stored record and the text the model reads. Pure.

The result is stored as MCP returned it (content blocks - text, images, audio,
resource links, embedded resources - structured content, ``isError``), canonical
JSON, cut at the stored-output cap like a script's output. The model reads text:
each text block as is, other blocks as one line saying what they are, structured
content as canonical JSON when there is no content; capped at the policy's
``output_cap_bytes`` with the marker script output uses. Images a provider accepts
are shown to the model after the text (``orchestrator._images``); their line says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._effects import McpOutcome
from .._images import MAX_IMAGES, block_image
from .._model import encode_canonical
from .._output import cut_text


def outcome_of(
    result: Mapping[str, Any], *, stored_cap: int, model_cap: int, duration_ms: int
) -> McpOutcome:
    """The outcome of a call the server answered with ``result`` (wire form)."""
    full = encode_canonical(result)
    return McpOutcome(
        content=cut_text(model_text(result), model_cap),
        stored=full[:stored_cap],
        size=len(full),
        is_error=result.get("isError") is True,
        truncated=len(full) > stored_cap,
        duration_ms=duration_ms,
    )


def failure(kind: str, message: str, *, duration_ms: int = 0) -> McpOutcome:
    """The outcome of a call the server gave no result for; ``stored`` records why."""
    stored = encode_canonical({"failure": kind, "message": message})
    return McpOutcome(
        content=message,
        stored=stored,
        size=len(stored),
        duration_ms=duration_ms,
        failure=kind,
    )


def model_text(result: Mapping[str, Any]) -> str:
    blocks = result.get("content") or []
    if not blocks and result.get("structuredContent") is not None:
        return encode_canonical(result["structuredContent"]).decode()
    lines, shown = [], 0
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        image = block_image(block) if shown < MAX_IMAGES else None
        if image is not None:
            shown += 1
            lines.append(f"[image {image[0]}, {len(image[1])} bytes, attached]")
        else:
            lines.append(_block_text(block))
    return "\n".join(lines)


def _block_text(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        size = len(str(block.get("data", ""))) * 3 // 4
        return f"[{kind} {block.get('mimeType', '?')}, about {size} bytes, kept in the session log]"
    if kind == "resource_link":
        return f"[resource link {block.get('uri', '')} ({block.get('name', '')})]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[resource {resource.get('uri', '')}, binary, kept in the session log]"
    return f"[{kind} content, kept in the session log]"
