"""The issue's "done when": a session recorded by ``skillog demo`` exports over OTLP/HTTP
as one well-formed trace, and live export of the same run gives the same ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import main


def test_demo_session_exports_as_one_well_formed_trace(
    tmp_path: Path, receiver: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["otel", "export", "--all", "--endpoint", receiver.url, "--db", str(db)]) == 0
    assert "exported 1 sessions" in capsys.readouterr().out
    spans = receiver.spans
    assert len({s.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if not s.parent_span_id]
    assert root.name.startswith("invoke_agent")
    ids = {s.span_id for s in spans}
    assert len(ids) == len(spans)
    for span in spans:
        if span is not root:
            assert span.parent_span_id == root.span_id
            assert root.start_time_unix_nano <= span.start_time_unix_nano
            assert span.end_time_unix_nano <= root.end_time_unix_nano
    kinds = {receiver.attrs(s)["gen_ai.operation.name"] for s in spans}
    assert kinds == {"invoke_agent", "chat", "execute_tool"}
    tools = {
        receiver.attrs(s)["gen_ai.tool.name"] for s in spans if s.name.startswith("execute_tool")
    }
    assert "skills.load" in tools
