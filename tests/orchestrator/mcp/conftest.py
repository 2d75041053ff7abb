"""Real MCP servers (tests/orchestrator/mcp/mcp_server.py) for the session tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.mcp import McpServerConfig

SERVER = Path(__file__).with_name("mcp_server.py")


@pytest.fixture
def server_dir(tmp_path: Path) -> Path:
    """A private copy of the server script: deleting it proves nothing needs it."""
    directory = tmp_path / "servers"
    directory.mkdir()
    shutil.copy(SERVER, directory / SERVER.name)
    return directory


@pytest.fixture
def stdio(server_dir: Path) -> Callable[..., McpServerConfig]:
    """``stdio(name, kind, **options)``: the copied server script of ``kind`` as the
    stdio server ``name``."""

    def make(name: str, kind: str, **options: Any) -> McpServerConfig:
        script = str(server_dir / SERVER.name)
        return McpServerConfig(name=name, command=sys.executable, args=(script, kind), **options)

    return make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def http_docs() -> Iterator[str]:
    """The ``docs`` server over streamable HTTP on loopback, one per test module."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "docs", "--http", str(port)], env=dict(os.environ)
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the HTTP MCP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()
