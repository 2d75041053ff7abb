"""The service's configuration: one typed object, built by ``skillog serve`` (or a
test) and read by every handler. It holds no state of the service: the store is the
log, the token book a view of the configuration file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from eventlog import EventStore

from .._events import PolicyConfig
from .._loop import Agent
from .._previews import PreviewBoard
from ._auth import TokenBook
from ._console_sessions import ConsoleSessions
from ._notify import Webhook
from ._proxy import Proxying
from ._sse import StreamLimits, Tail

MAX_BODY = 64 * 1024
DEFAULT_POLICY = "default"


def default_presets() -> dict[str, PolicyConfig]:
    return {DEFAULT_POLICY: PolicyConfig()}


@dataclass(frozen=True)
class ServiceContext:
    """``models``: the model specs a submission may name (the first is the default);
    ``make_agent(spec)`` builds the agent that records a submitted session's start
    (blocking: discovery reads the disk; called from a worker thread), with every skill
    the server offers (a submission may choose a subset); ``policies`` the policy
    presets a submission may name (the first is the default), recorded in full in the
    session's start, which is what every worker enforces;
    ``otel_endpoint`` the OTLP/HTTP backend of the export trigger, set by the operator
    (never by a client: the service sends to no address a request names);
    ``proxying`` the trusted proxies and the public origin (``_proxy``);
    ``stream_limits`` the caps on live event streams; ``webhook`` where to notify
    (``_notify``); ``console`` the console's logins
    (the one thing the service keeps in memory: a restart logs consoles out);
    ``previews`` the live previews of streamed answers, for the followers of this
    process (``_previews``: never recorded, lossy)."""

    store: EventStore
    tokens: TokenBook
    models: tuple[str, ...]
    make_agent: Callable[[str], Agent]
    policies: Mapping[str, PolicyConfig] = field(default_factory=default_presets)
    max_body: int = MAX_BODY
    otel_endpoint: str | None = None
    proxying: Proxying = field(default_factory=Proxying)
    stream_limits: StreamLimits = field(default_factory=StreamLimits)
    console: ConsoleSessions = field(default_factory=ConsoleSessions)
    webhook: Webhook | None = None
    tail: Tail = field(init=False)  # one follow of the log, run by serve()
    previews: PreviewBoard = field(default_factory=PreviewBoard)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tail", Tail(self.store))
