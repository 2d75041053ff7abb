"""docs/cli.md is the CLI's own help: regenerate it when a command changes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli._main import COMMANDS
from orchestrator.cli._reference import render

DOC = Path(__file__).parents[2] / "docs" / "cli.md"


def test_the_command_reference_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/cli.md is stale: python -m orchestrator.cli._reference > docs/cli.md"
    )


def test_it_covers_every_command_and_action() -> None:
    text = render()
    for name in COMMANDS:
        assert f"## `skillog {name}`" in text
    for action in ("skills install", "log verify", "otel export"):
        assert f"## `skillog {action}`" in text
