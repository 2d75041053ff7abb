"""The skillog dispatcher: help, errors as one line, and closed pipes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli._main import COMMANDS, main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: skillog" in capsys.readouterr().out


def test_library_errors_become_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_sqlite = tmp_path / "x.db"
    not_sqlite.write_bytes(b"definitely not a database" * 100)
    assert main(["sessions", "--db", str(not_sqlite)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("skillog sessions: error:") and "Traceback" not in err
    assert err.count("\n") == 1


def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    proc = subprocess.run(
        f"{sys.executable} -m orchestrator.cli demo --db {db} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.startswith("skillog demo: session")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_sessions_lists_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "demo.db")
    assert main(["demo", "--db", db]) == 0
    capsys.readouterr()
    assert main(["sessions", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "ended (completed)" in out and "skillog.scripted:demo-script" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("skillog 0.")


def test_the_transcript_shows_errors_whole() -> None:
    from orchestrator._events import PolicyDenied, ToolCompleted
    from orchestrator._transcript import transcript

    long = "the reason " * 30 + "END-OF-REASON"
    lines = list(
        transcript(
            [
                PolicyDenied(call_id="c", tool="t", rule="approval", reason=long),
                ToolCompleted(call_id="c", tool="t", is_error=True, content=long, duration_ms=0),
            ]
        )
    )
    text = " ".join(line[11:].strip() for line in lines)
    assert text.count("END-OF-REASON") == 2 and "…" not in text
    assert all(len(line) <= 96 for line in lines)


@pytest.mark.parametrize(
    "words",
    [
        "sessions {db}", "--db {path} sessions", "log verify {db}", "log {db} verify",
        "--db={path} log verify", "skills {db} list", "skills list {db}",
        "otel {db} metrics --all", "approvals {db}", "--db {path} approvals",
    ],
)  # fmt: skip
def test_db_goes_before_or_after_the_command(
    tmp_path: Path, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    capsys.readouterr()
    argv = shlex.split(words.format(db=f"--db {db}", path=db))
    assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("words", "usage"),
    [
        ("log verify --bogus", "usage: skillog log verify "),
        ("skills list --bogus x", "usage: skillog skills list "),
        ("demo --bogus", "usage: skillog demo "),
        ("otel metrics --all --bogus", "usage: skillog otel metrics "),
    ],
)
def test_an_unknown_option_shows_the_usage_of_the_command_that_failed(
    words: str, usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(shlex.split(words))
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("command", ["run --model demo x", "serve"])
@pytest.mark.parametrize("value", ["-1", "0", "many"])
def test_a_turn_bound_below_one_is_refused(
    command: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main([*shlex.split(command), "--max-turns", value])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --max-turns: '{value}' is not a number of turns" in err
    assert "at least 1" in err
