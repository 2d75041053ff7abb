"""``skillog mcp serve``: the skills runtime served to MCP clients (docs/mcp.md).

Each client connection is a session in the log; the client's own model is the
session's model (``ClientModel``), so its calls take the same pipeline as every other
session's. An edge over the runtime: nothing in the core imports it. Needs the ``mcp``
extra (``pip install 'skillog[mcp]'``).
"""

from ._http import serve_http as serve_http
from ._server import SkillogMcp as SkillogMcp
from ._server import serve_stdio as serve_stdio
from ._session import ServeConfig as ServeConfig
from ._session import ServedSession as ServedSession

__all__ = ["ServeConfig", "ServedSession", "SkillogMcp", "serve_http", "serve_stdio"]
