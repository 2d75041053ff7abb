"""`skillog submit --follow`: a `skillog worker` process drives the session; the
submitter prints what is recorded and, through the log's side file, the answer's text
as it streams (control characters made visible), then the transcript."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "orchestrator.cli"]
TEXT = "Streaming to the terminal, piece by piece, \x1b[31mred\x1b[0m, then recorded."


def test_submit_follow_prints_the_text_before_the_response(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    script = tmp_path / "turns.yaml"
    script.write_text(
        f'turns:\n  - text: "{TEXT}"\n    stream_delay_ms: 80\n'.replace("\x1b", "\\e")
    )
    worker = subprocess.Popen(
        [*CLI, "worker", "--db", str(db), "--poll-ms", "50"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        follow = subprocess.run(
            [*CLI, "submit", "stream", "--model", f"scripted:{script}", "--db", str(db),
             "--follow"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    assert follow.returncode == 0, follow.stderr
    err = follow.stderr
    assert "\x1b" not in err and "\x1b" not in follow.stdout  # nothing raw to a terminal
    shown = TEXT.replace("\x1b", "\\x1b")
    lines = err.splitlines()
    # The text streamed in before model.responded was recorded (what the previews
    # missed of its end, lost on the way, is printed from the recorded response).
    assert lines.index(shown) < lines.index("· model.responded") < lines.index("· session.ended")
    assert lines[0] == "· session.started"
    # Then stdout: the session id and the transcript, from the log.
    session, *transcript = follow.stdout.splitlines()
    assert len(session) == 32
    assert any(shown in line for line in transcript)


def test_submit_follow_takes_one_task(tmp_path: Path) -> None:
    out = subprocess.run(
        [*CLI, "submit", "a", "b", "--model", "scripted:x.yaml", "--db", str(tmp_path / "x.db"),
         "--follow"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode != 0
    assert "--follow follows one session: give one task" in out.stderr
    assert "Traceback" not in out.stderr


def test_submit_follow_prints_mcp_progress_while_the_call_runs(tmp_path: Path) -> None:
    """An MCP call's progress, from the worker through the side file: a line each (made
    inert, as `skillog run` prints it), between the call's intent and its outcome."""
    import json
    import os

    server = Path(__file__).with_name("mcp") / "mcp_server.py"
    config = tmp_path / "config.yaml"
    modern = {"command": sys.executable, "args": [str(server), "modern"]}
    config.write_text("mcp:\n  servers:\n    modern: " + json.dumps(modern) + "\n")
    env = {**os.environ, "SKILLOG_CONFIG": str(config)}
    db = tmp_path / "fleet.db"
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n  - tool_calls: [{name: mcp__modern__steps, arguments: {count: 3, "
        "delay_ms: 300}}]\n  - text: done\n"
    )
    worker = subprocess.Popen(
        [*CLI, "worker", "--db", str(db), "--poll-ms", "50"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        follow = subprocess.run(
            [*CLI, "submit", "steps", "--model", f"scripted:{script}", "--db", str(db),
             "--follow"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    assert follow.returncode == 0, follow.stderr
    lines = follow.stderr.splitlines()
    first = lines.index("[modern: 1.0/3.0 step 1]")
    assert lines.index("· tool.called") < first < lines.index("· tool.completed")
    ticks = [line for line in lines if line.startswith("[modern: ")]
    assert ticks == [f"[modern: {n}.0/3.0 step {n}]" for n in (1, 2, 3)][: len(ticks)]
