"""Errors raised while setting up or driving a model adapter."""

from __future__ import annotations

from eventlog import SkillogError

from .._model import ModelError, ModelErrorKind


class AdapterConfigError(SkillogError):
    """An adapter cannot be set up: a bad spec string, a missing SDK or API key."""


class ScriptError(AdapterConfigError):
    """A model script (a file of turns, or turns given in code) is invalid.

    The message names the source (the file, or ``<code>``) and the turn (``$.turns[N]``).
    """


class ToolNameError(ModelError):
    """The request's tools cannot be named on a provider's wire: a name holds a character
    the provider refuses, is too long, or two names would collide once mapped."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="other", retryable=False)


class RecordingError(ModelError):
    """A :class:`RecordedModel` cannot answer: the caller asked for more responses than
    were recorded, or its request differs from the recorded one. Under replay this means
    the code being replayed diverges from the code that made the recording."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message, kind="other", retryable=False)
        self.index = index


_ALWAYS_RETRYABLE: frozenset[ModelErrorKind] = frozenset(
    {"rate_limited", "timeout", "connection", "malformed"}
)


def default_retryable(kind: ModelErrorKind, status: int | None = None) -> bool:
    """Whether trying again may help, for a failure of this kind.

    Rate limits, timeouts and broken connections pass; a malformed answer is a sample
    the next call will not repeat; a server error (5xx) may be transient; any other
    HTTP status (4xx) means the request itself is wrong and will fail again.
    """
    if kind in _ALWAYS_RETRYABLE:
        return True
    if kind == "http":
        return status is not None and status >= 500
    return False
