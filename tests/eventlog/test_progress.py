"""Progress lines: drawn on a terminal only, erased when the work is done."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog._progress import Progress
from orchestrator.cli import main

CLI = [sys.executable, "-m", "orchestrator.cli"]


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = Progress("verified", 10)
    progress(5)
    progress.close()
    assert capsys.readouterr().err == "" and progress.done == 5


def _stderr_on_a_terminal(argv: list[str], cwd: Path) -> str:
    """Run ``skillog argv`` with stderr on a pseudo-terminal; what the terminal got."""
    leader, follower = pty.openpty()
    proc = subprocess.run(
        [*CLI, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=follower, timeout=120
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.returncode == 0
    return b"".join(chunks).decode()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["log", "verify"], "verified: "),
        (["log", "export", "--out", "out.jsonl"], "exported: "),
        (["replay", "SESSION"], "events proved: "),
        (["otel", "metrics", "--all"], None),  # quick, prints data: no progress line
    ],
)
def test_long_commands_draw_progress_on_a_terminal(
    tmp_path: Path, argv: list[str], line: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "skillog.db"
    assert main(["demo", "--db", str(db)]) == 0
    session = re.search(r"session ([0-9a-f]{32})", capsys.readouterr().out)
    assert session is not None
    argv = [session[1] if a == "SESSION" else a for a in argv]
    got = _stderr_on_a_terminal([*argv, "--db", str(db)], tmp_path)
    if line is None:
        assert got == ""
    else:
        drawn, _, after = got.rpartition(line)
        assert drawn.startswith("\r") and "%" in after and "\r\x1b[K" in after  # then erased
        assert all(int(p) <= 100 for p in re.findall(r"(\d+)%", got))
