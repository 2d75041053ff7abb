"""MCP software skillog did not write, pinned in .ci/npm/package.json (and its lock) and
installed by .ci/test with ``npm ci``: the official TypeScript SDK, the MCP Inspector
and server-everything. Where it is not installed the tests skip with one line saying
so; in CI (``CI=true``) they fail instead."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NPM = Path(__file__).resolve().parents[3] / ".ci" / "npm"
NODE_MODULES = NPM / "node_modules"


def _missing(what: str) -> None:
    message = f"{what} is not installed: run .ci/test (npm ci --prefix .ci/npm)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; in CI the foreign-software tests must run")
    pytest.skip(message)


def node() -> str:
    found = shutil.which("node")
    if found is None:
        _missing("node")
    assert found is not None
    return found


def package_file(package: str, path: str) -> Path:
    """A file of an npm package installed under .ci/npm."""
    node()
    found = NODE_MODULES / package / path
    if not found.exists():
        _missing(f"{package} ({found})")
    return found


def server_everything() -> Path:
    return package_file("@modelcontextprotocol/server-everything", "dist/index.js")


def inspector() -> Path:
    return package_file("@modelcontextprotocol/inspector", "cli/build/cli.js")
