"""MCP progress to observers in other processes (issue 24, item 10): a session's MCP
call sends progress notifications slowly; a follower of the session's SSE
(``?previews=1``) sees them as ``event: progress`` messages (no id) while the call runs,
before its outcome is recorded — from serve's own worker, and through the log's side
file from a ``skillog worker`` process. Nothing of it is in the log: the events sent
are the stored ones, and a session nobody followed recorded the same events."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from orchestrator._events import CODEC, McpResult, ToolCompleted

from .conftest import running_service
from .test_api import submit, wait_for
from .test_previews import Message, watch

SERVER = Path(__file__).parents[1] / "orchestrator" / "mcp" / "mcp_server.py"
STEPS = """\
turns:
  - tool_calls: [{name: mcp__modern__steps, arguments: {count: 3, delay_ms: 300}}]
  - text: "Done."
"""


def with_server(config: Path) -> None:
    """The test MCP server ``modern`` in the configuration file, for every session."""
    server = {"command": sys.executable, "args": [str(SERVER), "modern"]}
    with config.open("a") as file:
        file.write("mcp:\n  servers:\n    modern: " + json.dumps(server) + "\n")


def check_progress(seen: list[Message], stored_hashes: list[str]) -> None:
    events = [data for kind, data, _ in seen if kind == "message"]
    assert [e["hash"] for e in events] == stored_hashes  # the log, no preview among it
    ticks = [(i, data, ident) for i, (kind, data, ident) in enumerate(seen) if kind == "progress"]
    assert ticks, [kind for kind, _, _ in seen]
    assert all(ident is None for _, _, ident in ticks)
    called = next(i for i, m in enumerate(seen) if m[1].get("type") == "tool.called")
    completed = next(i for i, m in enumerate(seen) if m[1].get("type") == "tool.completed")
    # While the call ran: after its intent, the first one before its outcome.
    assert called < ticks[0][0] < completed
    call_id = seen[called][1]["body"]["call_id"]  # type: ignore[index]
    for _, data, _ in ticks:
        assert data["kind"] == "progress" and data["name"] == "modern"
        assert data["call_id"] == call_id and data["total"] == "3.0"
    steps = [(d["progress"], d["text"]) for _, d, _ in ticks]
    # Lossy across processes (the last may come after the end), never out of order.
    assert steps == [("1.0", "step 1"), ("2.0", "step 2"), ("3.0", "step 3")][: len(steps)]


@pytest.mark.parametrize("driver", ["serve", "worker", "worker-postgres"])
async def test_a_follower_sees_mcp_progress_before_the_outcome(
    tmp_path: Path,
    service_env: tuple[Path, dict[str, str]],
    driver: str,
    request: pytest.FixtureRequest,
) -> None:
    """From serve's own worker; from a ``skillog worker`` process through the side
    file (SQLite) or NOTIFY (PostgreSQL)."""
    config, tokens = service_env
    with_server(config)
    extra = ("--workers", "0") if driver != "serve" else ()
    db = request.getfixturevalue("pg_dsn") if driver == "worker-postgres" else None
    async with running_service(tmp_path, config, tokens, *extra, turns=STEPS, db=db) as service:
        worker = None
        if driver != "serve":
            worker = await trio.lowlevel.open_process(
                [sys.executable, "-m", "orchestrator.cli", "worker", "--db", str(service.db),
                 "--poll-ms", "50", "--project", str(tmp_path)],
                env={**os.environ, "SKILLOG_CONFIG": str(config)},
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
        try:
            async with service.client("victor") as client:
                followed = await submit(service, task="take steps")
                seen = await watch(client, followed)
                # The same task with nobody following.
                alone = await submit(service, task="take steps")
                await wait_for(service, alone, "ended")
            stored = [e.hash async for e in service.store.read(followed)]
            logs = [
                [CODEC.decode(e) async for e in service.store.read(s)] for s in (followed, alone)
            ]
            notes = []
            for bodies in logs:
                (result,) = [b for b in bodies if isinstance(b, McpResult)]
                assert result.notes is not None
                notes.append(await service.store.get_blob(result.notes))
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                assert worker.stderr is not None
                err = b"".join([chunk async for chunk in worker.stderr])
                assert await worker.wait() == 0, err.decode()
    check_progress(seen, stored)
    # Followed or not, the same events were recorded: the ticks are kept once, in the
    # call's notes, byte for byte the same.
    assert [b.event_type for b in logs[0]] == [b.event_type for b in logs[1]]
    assert notes[0] == notes[1]
    assert len(json.loads(notes[0])["progress"]) == 3
    completed = [[b.content for b in bodies if isinstance(b, ToolCompleted)] for bodies in logs]
    assert completed[0] == completed[1]


def test_console_shows_progress_under_the_running_call_in_chromium(tmp_path: Path) -> None:
    """The session page shows the latest progress of an MCP call on a line under the
    running call, before its outcome is recorded; the line goes when it is."""
    from chromium import need_chromium
    from playwright.sync_api import expect

    from orchestrator.service import new_token
    from orchestrator.skills._config import add_service_token

    from .conftest import write_skill
    from .test_browser import logged_in
    from .test_cli_serve import start, stop

    need_chromium()
    config = tmp_path / "config.yaml"
    token, entry = new_token("ada", ("admin",))
    add_service_token(str(config), entry)
    with_server(config)
    (tmp_path / "turns.yaml").write_text(STEPS.replace("300", "1500"))
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path / "home")}
    model = f"scripted:{tmp_path / 'turns.yaml'}"
    proc, url = start(tmp_path, env, "--model", model, "--skills", str(write_skill(tmp_path)))
    try:
        with logged_in(url, token) as page:
            page.fill("#task", "take steps")
            page.click("#submit button")
            page.wait_for_url(url + "/console/sessions/*")
            completed = page.locator('#events li[data-type="tool.completed"]')
            line = page.locator("#trace .node[data-call] > summary > .progress")
            # Any step's line: the page shows the latest, and one that loads late (a
            # loaded machine) may first look after step 1 was replaced by step 2.
            step = re.compile(r"modern: ([123])\.0/3\.0 step \1")
            expect(line).to_contain_text(step, timeout=30_000)
            assert completed.count() == 0
            expect(completed).to_have_count(1, timeout=30_000)
            expect(line).to_have_count(0)
    finally:
        stop(proc)
