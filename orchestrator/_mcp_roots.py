"""The roots an MCP server is told (``roots/list``): the folders of the session's
active skills, for the servers ``policy.mcp.roots`` names, as ``file://`` URIs.

A pure function of the session's state: what each server is told is recorded
(``mcp.roots_changed``) between turns, before the prompt, whenever it differs from
what the log last said, and only then is the server sent
``notifications/roots/list_changed``; a ``roots/list`` is answered with what the log
says, so the answer a server got is always in the log before it could ask. A skill's
folder is known only in a session with ``file_access`` (its catalog entry holds the
``SKILL.md`` location); inline skills have none. Before any skill is active, or for a
server policy does not name, the list is empty.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ._events import McpRoot, McpRootsChanged, McpToolsListed
from ._mcp_sampling import allows
from ._state import SessionState


def roots_of(state: SessionState, server: str) -> tuple[McpRoot, ...]:
    """What ``server`` may be told now: each active skill's folder, in load order."""
    assert state.config is not None
    if not allows(state.config.policy.mcp.roots, server):
        return ()
    roots = []
    for skill in state.active:
        info = state.catalog.get(skill.name)
        location = info.location if info is not None else None
        if location is None or not location.startswith("/"):
            continue
        roots.append(McpRoot(uri=PurePosixPath(location).parent.as_uri(), name=skill.name))
    return tuple(roots)


def roots_changes(state: SessionState) -> list[McpRootsChanged]:
    """A ``mcp.roots_changed`` for each listed server whose roots differ from the log's."""
    out = []
    for server in sorted(state.mcp_servers):
        if not isinstance(state.mcp_servers[server], McpToolsListed):
            continue
        roots = roots_of(state, server)
        if roots != state.mcp_roots.get(server, ()):
            out.append(McpRootsChanged(server=server, roots=roots))
    return out
