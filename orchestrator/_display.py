"""How a reader is shown what the log holds, where the stored bytes say more than a
viewer should see: a scripted model is shown by its file's name (``scripted:turns.yaml``),
never the path on the machine that ran it. The log keeps the bytes it hashed; every
reader that shows a model (the service's lists, its events and live streams, the audit
page) goes through these functions, so they all show the same."""

from __future__ import annotations

import posixpath
from html import escape

import msgspec

from ._events import SessionStarted

SCRIPTED = ("scripted", "skillog.scripted")


def _name(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/")) or path


def shown_model(spec: str) -> str:
    """A model spec (``provider:model``) as readers see it: a scripted model by its
    file's name, not the path to it; any other spec as it is."""
    provider, sep, rest = spec.partition(":")
    if sep and provider in SCRIPTED:
        return f"scripted:{_name(rest)}"
    return spec


def hidden_path(config: SessionStarted | None) -> str | None:
    """The path a session's records hold that readers are not shown (its scripted
    model's file), or None."""
    if config is None or config.provider not in SCRIPTED or _name(config.model) == config.model:
        return None
    return config.model


def shown_json(body: bytes, path: str | None) -> bytes:
    """``body`` (JSON) with every string that is exactly ``path`` replaced by the file's
    name; the same bytes when there is none."""
    if not path:
        return body
    return body.replace(msgspec.json.encode(path), msgspec.json.encode(_name(path)))


def shown_text(text: str, path: str | None) -> str:
    """Plain ``text`` with ``path`` replaced by the file's name."""
    return text.replace(path, _name(path)) if path else text


def shown_html(page: str, path: str | None) -> str:
    """An HTML page with ``path`` (as text, escaped or not) replaced by the file's name."""
    if not path:
        return page
    for form in {escape(path), escape(path, quote=False), path}:
        page = page.replace(form, escape(_name(path)))
    return page
