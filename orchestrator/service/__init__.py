"""skillog as a service: an HTTP API, live events and a web console over the log.

``skillog serve`` (docs/service.md). The service keeps no state of its own: what it
shows is read from the log, what it changes is an event (a submitted session's start,
an approval decision).
"""

from ._app import create_app as create_app
from ._auth import ROLES as ROLES
from ._auth import Principal as Principal
from ._auth import TokenBook as TokenBook
from ._auth import ensure_token as ensure_token
from ._auth import new_token as new_token
from ._auth import token_digest as token_digest
from ._context import DEFAULT_POLICY as DEFAULT_POLICY
from ._context import ServiceContext as ServiceContext
from ._context import default_presets as default_presets
from ._notify import Webhook as Webhook
from ._proxy import Proxying as Proxying
from ._serve import hypercorn_config as hypercorn_config
from ._serve import is_loopback as is_loopback
from ._serve import serve as serve
from ._sse import StreamLimits as StreamLimits
from ._sse import session_events as session_events

__all__ = [
    "DEFAULT_POLICY",
    "ROLES",
    "Principal",
    "Proxying",
    "ServiceContext",
    "StreamLimits",
    "TokenBook",
    "Webhook",
    "create_app",
    "default_presets",
    "ensure_token",
    "hypercorn_config",
    "is_loopback",
    "new_token",
    "serve",
    "session_events",
    "token_digest",
]
