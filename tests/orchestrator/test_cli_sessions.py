"""``skillog sessions``, ``resume`` and ``replay`` of forks, as a user types them:
most recent first, turn counts, end reasons, suspended sessions and forks with their
parent; a fork resumes with another model and replays with its link to its parent
proven (and a forged link is refused)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from orchestrator.cli import main

SKILL = """\
---
name: greet
description: Greets people.
---
Run scripts/hi.py.
"""
TURNS = """\
turns:
  - text: "Loading."
    tool_calls: [{name: skills.load, arguments: {names: [greet]}}]
  - text: "Running it."
    tool_calls: [{name: skills.run_script, arguments: {path: scripts/hi.py, args: [a]}}]
  - text: "Done."
"""
ENDING = """\
turns:
  - text: "Loading."
    tool_calls: [{name: skills.load, arguments: {names: [greet]}}]
  - text: "A different ending."
"""


class Cli:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp, self.capsys = tmp_path, capsys
        self.db = tmp_path / "log.db"

    def __call__(self, *args: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in (*args, "--db", self.db)])
        out, err = self.capsys.readouterr()
        return code, out, err

    def run(self, *more: str | Path) -> str:
        """`skillog run` with the greet skill and the scripted turns; the session id."""
        code, out, err = self(
            "run", "greet me", "--model", f"scripted:{self.tmp / 'turns.yaml'}",
            "--skills", self.tmp / "skills" / "greet", "--project", self.tmp, *more,
        )  # fmt: skip
        assert code in (0, 1), out + err
        return self.rows()[0]["session"]

    def rows(self) -> list[dict[str, object]]:
        code, out, _ = self("sessions", "--json")
        assert code == 0
        return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    skill = tmp_path / "skills" / "greet"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    (skill / "scripts" / "hi.py").write_text("print('hi')\n")
    (tmp_path / "turns.yaml").write_text(TURNS)
    (tmp_path / "ending.yaml").write_text(ENDING)
    return Cli(tmp_path, capsys)


def test_sessions_most_recent_first_with_turns_end_reasons_suspensions_and_forks(
    cli: Cli,
) -> None:
    completed = cli.run("--approve")
    capped = cli.run("--approve", "--max-turns", "1")
    suspended = cli.run()  # nobody to ask (stdin is not a terminal): it suspends
    code, out, err = cli("replay", completed, "--fork-at", "9")
    assert code == 0, err
    fork = out.strip()

    rows = cli.rows()
    assert [r["session"] for r in rows] == [fork, suspended, capped, completed]
    by_id = {r["session"]: r for r in rows}
    assert by_id[completed]["status"] == "ended (completed)"
    assert by_id[completed]["end_reason"] == "completed" and by_id[completed]["turns"] == 3
    assert by_id[capped]["status"] == "ended (max_turns)" and by_id[capped]["turns"] == 1
    assert by_id[suspended]["state"] == "awaiting_approval"
    assert by_id[suspended]["status"] == "suspended: awaiting approval (1 pending)"
    assert by_id[suspended]["end_reason"] is None and by_id[suspended]["turns"] == 2
    assert by_id[fork]["forked_from"] == completed and by_id[fork]["fork_at_seq"] == 9
    assert by_id[fork]["status"] == "open (resumable)" and by_id[fork]["turns"] == 2
    assert all(r["forked_from"] is None for r in rows if r["session"] != fork)

    code, out, _ = cli("sessions")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert lines[fork].rstrip().endswith(f"open (resumable)  fork of {completed}@9")
    assert "suspended: awaiting approval (1 pending)" in lines[suspended]
    assert "ended (max_turns)" in lines[capped]

    # Decided from another process: the session is still suspended, now resumable.
    code, out, _ = cli("approvals", "--json")
    call = json.loads(out.splitlines()[0])["call_id"]
    assert cli("approve", suspended, call)[0] == 0
    status = {r["session"]: r["status"] for r in cli.rows()}[suspended]
    assert status == "suspended: approvals decided, resume it"


def test_a_fork_resumes_from_the_cli_and_replays_with_its_link_proven(cli: Cli) -> None:
    parent = cli.run("--approve")
    code, out, err = cli("replay", parent, "--fork-at", "7")  # the skill loaded, turn 1 done
    fork = out.strip()
    assert code == 0 and f"skillog resume {fork}" in err

    code, out, err = cli("resume", fork, "--model", f"scripted:{cli.tmp / 'ending.yaml'}")
    assert code == 0, out + err
    assert "A different ending." in out and "completed after 2 turns" in out
    row = {r["session"]: r for r in cli.rows()}[fork]
    assert row["status"] == "ended (completed)" and row["forked_from"] == parent

    # Every prompt of the fork is proven, the inherited ones included, and the link
    # to the parent is checked against the parent's chain.
    code, out, err = cli("replay", fork)
    assert code == 0, out + err
    assert f"fork of {parent}@7: the 8 copied events are the parent's seqs 0..7" in out
    assert "every request reproduced byte for byte" in out
    code, out, _ = cli("replay", fork, "--html", cli.tmp / "fork.html")
    assert code == 0 and "✓ fork" in out


def test_a_forged_fork_link_is_refused(cli: Cli) -> None:
    parent = cli.run("--approve")
    fork = cli("replay", parent, "--fork-at", "9")[1].strip()
    # Rewrite the parent's copied event in the fork and re-chain nothing: the fork's own
    # chain breaks. Rewrite it in the parent instead: the parent's chain breaks, and the
    # fork, whose chain is intact, fails on its link.
    conn = sqlite3.connect(cli.db)
    with conn:
        conn.execute(
            "UPDATE events SET body = CAST(replace(body, 'greet me', 'greet them') AS BLOB) "
            "WHERE stream = ? AND seq = 2",
            [parent],
        )
    conn.close()
    code, _, err = cli("replay", fork)
    assert code == 2 and "session.forked: the parent's chain does not verify" in err
    code, out, _ = cli("replay", fork, "--html", cli.tmp / "forged.html")
    assert code == 1 and "✗ fork" in out and "✓ chain" in out
    # A fork exported without its parent: the link is reported, not proven.
    export = cli.tmp / "fork.jsonl"
    assert cli("log", "export", fork, "--out", export)[0] == 0
    assert main(["replay", fork, "--jsonl", str(export)]) == 0
    out = cli.capsys.readouterr().out
    assert f"fork of {parent}@9: the parent session {parent} is not in this log" in out


def test_resuming_an_ended_session_says_it_ended_and_how_to_go_on(cli: Cli) -> None:
    session = cli.run("--approve")
    events = cli.rows()[0]["events"]
    (cli.tmp / "turns.yaml").unlink()  # the model script is gone: not what matters here
    code, out, err = cli("resume", session)
    assert code == 2 and out == ""
    assert f"session {session} has ended (completed, after 3 turns)" in err
    assert f"`skillog replay {session} --fork-at SEQ`" in err
    assert "model script" not in err
    assert cli.rows()[0]["events"] == events  # nothing recorded
