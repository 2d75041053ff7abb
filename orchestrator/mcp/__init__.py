"""MCP (Model Context Protocol) servers as the session's tool sources (docs/mcp.md).

Servers are declared in the configuration file (``mcp.servers``) or in code
(``Agent(mcp_servers=[McpServerConfig(...)])``); ``Agent.run`` and ``Agent.resume``
connect them for the session's run and stop them after. Their tools are offered as
``mcp__<server>__<tool>`` and go through the same pipeline as every other tool.
Needs the ``mcp`` extra (``pip install 'skillog[mcp]'``).
"""

from ..skills import McpServerConfig as McpServerConfig
from ..skills import load_mcp_servers as load_mcp_servers
from ._client import CONTEXT_META as CONTEXT_META
from ._client import McpConfigError as McpConfigError
from ._client import McpServers as McpServers
from ._client import connect_servers as connect_servers
from ._listing import effect_of as effect_of
from ._listing import session_name as session_name
from ._listing import tools_listed as tools_listed

__all__ = [
    "CONTEXT_META",
    "McpConfigError",
    "McpServerConfig",
    "McpServers",
    "connect_servers",
    "effect_of",
    "load_mcp_servers",
    "session_name",
    "tools_listed",
]
