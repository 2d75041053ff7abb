"""Images a tool call returns, shown to the model with its result (docs/mcp.md).

An MCP tool's ``image`` content blocks and an image file a skill's ``skills.read``
returns become :class:`~orchestrator._model.ToolImage` parts of the tool message: the
bytes go to the blob store, the ``tool.images`` event names them, and the canonical
request carries only their digests. Only what both Anthropic and OpenAI accept is
shown: PNG, JPEG, GIF and WebP whose bytes are what their media type says, at most
:data:`MAX_IMAGE_BYTES` each and :data:`MAX_IMAGES` per call; anything else stays a
line of text, its bytes in the log.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ._calls import CallContext
from ._events import ImageRef, ToolImages

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""The largest image shown to the model (Anthropic's limit per image)."""

MAX_IMAGES = 8
"""The most images of one call shown to the model."""

_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_SUFFIXES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif"}
_SUFFIXES[".webp"] = "image/webp"


def image_type(data: bytes, media_type: str) -> str | None:
    """``media_type`` when the model can be shown ``data`` as such an image, else None."""
    magic = _MAGIC.get(media_type.lower())
    if magic is None or not 0 < len(data) <= MAX_IMAGE_BYTES or not data.startswith(magic):
        return None
    if media_type.lower() == "image/webp" and data[8:12] != b"WEBP":
        return None
    return media_type.lower()


def file_image_type(path: str, data: bytes) -> str | None:
    """The media type of a skill file shown as an image (by suffix and bytes), or None."""
    suffix = path[path.rfind(".") :].lower() if "." in path else ""
    media_type = _SUFFIXES.get(suffix)
    return None if media_type is None else image_type(data, media_type)


def block_image(block: Mapping[str, Any]) -> tuple[str, bytes] | None:
    """An MCP ``image`` content block as (media type, bytes) when it can be shown."""
    if block.get("type") != "image" or not isinstance(block.get("data"), str):
        return None
    try:
        data = base64.b64decode(block["data"], validate=True)
    except (binascii.Error, ValueError):
        return None
    media_type = image_type(data, str(block.get("mimeType", "")))
    return None if media_type is None else (media_type, data)


def mcp_images(stored: bytes) -> list[tuple[str, bytes]]:
    """The images to show of an MCP result as recorded (canonical JSON); none of a
    result cut at the stored cap (its blocks are not all there)."""
    if b'"type":"image"' not in stored:  # canonical JSON: no image block (the common case)
        return []
    try:
        result = msgspec.json.decode(stored)
    except msgspec.DecodeError:
        return []
    blocks = result.get("content") if isinstance(result, dict) else None
    found = [block_image(b) for b in blocks or () if isinstance(b, dict)]
    return [i for i in found if i is not None][:MAX_IMAGES]


def record_images(ctx: CallContext, images: Sequence[tuple[str, bytes]]) -> None:
    """Store ``images`` as blobs and add the call's ``tool.images`` to its outcome."""
    if images:
        refs = tuple(
            ImageRef(media_type=media_type, digest=ctx.rec.blob(data), size=len(data))
            for media_type, data in images
        )
        ctx.rec.add(ToolImages(call_id=ctx.call.id, images=refs))
