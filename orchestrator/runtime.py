"""The runtime's internals that re-derive a session: what the replayer (``replay``) and
the exporter (``otel``) need beyond the embedding face :mod:`orchestrator`.

Public so the packages above the core read it through one named surface, never through
private modules (an import-linter contract checks it); an embedding program needs none
of it. Names here change with the runtime's internals, not with the embedding API.

``composer`` is the prompt composer's module itself: the replayer looks its functions
up on it at each call, so the composer in force (a patched or reloaded one in tests
included) is the one a replay checks against, never a stale import.
"""

from . import _prompt as composer
from ._context import summary_request as summary_request
from ._effects import GetBlob as GetBlob
from ._effects import McpStatus as McpStatus
from ._effects import McpTask as McpTask
from ._loop import MAX_RESPONSE_CHARS as MAX_RESPONSE_CHARS
from ._model import History as History
from ._model import ModelErrorKind as ModelErrorKind
from ._model import StopReason as StopReason
from ._policy import budget_cost as budget_cost
from ._streams import LEASE_PREFIX as LEASE_PREFIX
from ._streams import is_session_stream as is_session_stream
from ._visibility import RefreshContext as RefreshContext

__all__ = [
    "LEASE_PREFIX",
    "MAX_RESPONSE_CHARS",
    "GetBlob",
    "McpStatus",
    "McpTask",
    "ModelErrorKind",
    "RefreshContext",
    "StopReason",
    "budget_cost",
    "composer",
    "is_session_stream",
    "summary_request",
]
