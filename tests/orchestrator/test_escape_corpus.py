"""The escape corpus (issue 23, docs/security.md "Terminal output"): a real session in a
SQLite file whose task, model text, tool arguments, script output, approval action and
skill description carry terminal escape sequences, then every command that prints log
content: no raw control or format character reaches stdout or stderr (newline and tab
aside), the text still shows (escaped), and ``--json`` decodes to the exact bytes."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import sqlite3
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from eventlog import inert_json, visible
from orchestrator.cli import main

CORPUS = {
    "csi erase line, cursor up": "\x1b[2K\x1b[1A",
    "sgr colour": "\x1b[32m(safe)\x1b[0m",
    "osc 0 title": "\x1b]0;pwned\x07",
    "osc 8 hyperlink": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "osc 52 clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "cr overwrite": "evil.csv\rsafe.csv",
    "backspace": "rm\x08\x08ls",
    "bel": "\x07",
    "del": "x\x7fy",
    "c1 csi": "\x9b2J",
    "bidi override": "\u202egpj.exe",
    "bidi isolate": "\u2066a\u2069",
    "zero width": "a\u200bb\u200dc\ufeff",
    "line separator": "a\u2028b",
}
PAYLOAD = "".join(CORPUS.values())
SHOWN = visible(PAYLOAD)  # what a person reads where one field is printed

ALLOWED = {"\n", "\t"}


def raw_controls(text: str) -> list[str]:
    """The characters in ``text`` a terminal could act on (besides newline and tab)."""
    return [
        repr(c)
        for c in text
        if c not in ALLOWED and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")
    ]


def strings(value: object) -> list[str]:
    """Every string in a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


@pytest.mark.parametrize(("name", "text"), sorted(CORPUS.items()))
def test_visible_leaves_no_raw_control(name: str, text: str) -> None:
    for lines in (False, True):
        shown = visible(text, lines=lines)
        assert raw_controls(shown) == [], name
        assert shown != text


def test_visible_keeps_ordinary_text_and_multi_line_layout() -> None:
    plain = "naïve café 数据 🙂 \\x1b stays as typed"
    assert visible(plain) is plain
    assert visible("a\nb\tc") == "a\\nb\\tc"
    assert visible("a\r\nb\tc\n", lines=True) == "a\nb\tc\n"
    assert visible("a\rb\x1b", lines=True) == "a\\rb\\x1b"
    assert visible("\U000e0041") == "\\U000e0041"  # a tag character


def test_visible_covers_every_control_and_format_character_of_this_python() -> None:
    missed = [
        hex(c)
        for c in range(sys.maxunicode + 1)
        if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
        and chr(c) not in ALLOWED
        and visible(chr(c), lines=True) == chr(c)
    ]
    assert missed == []


def test_inert_json_decodes_to_the_same_value() -> None:
    doc = {"payload": PAYLOAD, "emoji": "\U0001f642\U000e0041"}
    text = inert_json(json.dumps(doc, ensure_ascii=False))
    assert raw_controls(text) == []
    assert json.loads(text) == doc


SKILL = """\
---
name: corpus
description: {description}
---
Run scripts/echo.py with the file name.
{payload}
"""
SCRIPT = """\
import sys
print("out:", " ".join(sys.argv[1:]))
print("err:", " ".join(sys.argv[1:]), file=sys.stderr)
"""


class Cli:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp, self.capsys = tmp_path, capsys
        self.db = tmp_path / "log.db"

    def __call__(self, *args: str | Path, ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
        code = main([str(a) for a in (*args, "--db", self.db)])
        out, err = self.capsys.readouterr()
        assert code in ok, (args, out, err)
        assert raw_controls(out) == [], (args, out)
        assert raw_controls(err) == [], (args, err)
        return out, err


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    skill = tmp_path / "skills" / "corpus"
    (skill / "scripts").mkdir(parents=True)
    # JSON strings are YAML double-quoted strings: the escapes become the characters.
    description = json.dumps("Echoes a file name. " + PAYLOAD)
    (skill / "SKILL.md").write_text(SKILL.format(description=description, payload=PAYLOAD))
    (skill / "scripts" / "echo.py").write_text(SCRIPT)
    turns = [
        {
            "text": "Loading " + PAYLOAD,
            "tool_calls": [{"name": "skills.load", "arguments": {"names": ["corpus"]}}],
        },
        {
            "text": "Running it " + PAYLOAD,
            "tool_calls": [
                {
                    "name": "skills.run_script",
                    "arguments": {"path": "scripts/echo.py", "args": [PAYLOAD]},
                },
                {"name": "skills.read", "arguments": {"skill": "corpus", "path": PAYLOAD}},
            ],
        },
        {"text": "Done " + PAYLOAD},
    ]
    (tmp_path / "turns.json").write_text(json.dumps({"turns": turns}))
    return Cli(tmp_path, capsys)


def _run(cli: Cli) -> tuple[str, str]:
    """A third-party session: it suspends for the script's approval (nobody to ask)."""
    out, _ = cli(
        "run", "task " + PAYLOAD, "--model", f"scripted:{cli.tmp / 'turns.json'}",
        "--skills", cli.tmp / "skills" / "corpus", "--tier", "third-party",
        "--project", cli.tmp,
    )  # fmt: skip
    assert "waiting for approval" in out, out
    rows, _ = cli("sessions", "--json")
    session = json.loads(rows.splitlines()[0])["session"]
    pending, _ = cli("approvals", "--json")
    call = json.loads(pending.splitlines()[0])["call_id"]
    return session, call


def test_every_printer_of_log_content_shows_the_corpus_escaped(cli: Cli) -> None:
    skill = cli.tmp / "skills" / "corpus"
    session, call = _run(cli)
    # the transcript of the suspended session shows the task and model text escaped
    out, _ = cli("replay", session, "--timeline")
    assert SHOWN[:40] in out

    out, _ = cli("approvals")
    assert visible("echo.py " + PAYLOAD)[:60] in out.replace("scripts/", "")
    pending = json.loads(cli("approvals", "--json")[0].splitlines()[0])
    assert PAYLOAD in pending["action"]  # the exact text, one --json away

    cli("approve", session, call)
    out, _ = cli(
        "resume", session, "--skills", skill, "--tier", "third-party", "--project", cli.tmp
    )
    assert "\\x1b[2K" in out and "\\u202e" in out

    out, _ = cli("sessions")
    assert session in out
    cli("sessions", "--json")

    for args in (
        (),
        ("--json",),
        ("--timeline",),
        ("--timeline", "--json"),
        ("--against-disk", skill.parent),
        ("--redrive",),
        ("--html", cli.tmp / "report.html"),
    ):
        cli("replay", session, *args, ok=(0, 1))
    doc = json.loads(cli("replay", session, "--timeline", "--json")[0])
    assert any(PAYLOAD in text for text in strings(doc))

    for args in (("sessions",), ("show", session), ("verify",)):
        cli("log", *args)
    shown, _ = cli("log", "show", session)
    assert "\\u001b[2K" in shown  # the body as JSON, its raw characters escaped
    exact, _ = cli("log", "show", session, "--json")
    assert any(PAYLOAD in text for line in exact.splitlines() for text in strings(json.loads(line)))
    cli("log", "verify", "--json")

    project = cli.tmp / "project"
    shutil.copytree(skill, project / ".agents" / "skills" / "corpus")
    where = ("skills", "--project", project)
    out, _ = cli(*where, "list")
    assert "corpus" in out and "\\x1b[2K" in out
    cli(*where, "list", "--json")
    out, _ = cli(*where, "show", "corpus")
    assert "\\x1b[2K" in out and "\\u202e" in out
    exact = json.loads(cli(*where, "show", "corpus", "--json")[0])
    assert PAYLOAD in exact["description"]
    cli(*where, "validate", skill, ok=(0, 1))
    cli(*where, "validate", skill, "--json", ok=(0, 1))

    out, _ = cli("otel", "metrics", "--all")
    cli("otel", "metrics", "--all", "--json")
    cli("policy", "--session", session, ok=(0, 2))


def test_queued_sessions_and_the_worker_show_the_corpus_escaped(cli: Cli) -> None:
    """``submit``, ``worker`` (its lines and log records) and ``deny`` on a session whose
    task and model text carry the corpus; the worker's name is typed with it too."""
    skill = cli.tmp / "skills" / "corpus"
    where = ("--skills", skill, "--tier", "third-party", "--project", cli.tmp)
    out, _ = cli(
        "submit", "task " + PAYLOAD, "--model", f"scripted:{cli.tmp / 'turns.json'}", *where
    )
    session = out.strip()
    cli("worker", "--once", "--name", "w" + PAYLOAD, *where)
    pending = json.loads(cli("approvals", "--json")[0].splitlines()[0])
    out, _ = cli("deny", session, pending["call_id"], "--reason", PAYLOAD, "--by", PAYLOAD)
    assert "\\x1b" in out
    out, err = cli("worker", "--once", "--name", "w" + PAYLOAD, *where)
    assert session in out + err
    out, _ = cli("replay", session)
    assert "proven" in out or "reproduced" in out


def test_ids_and_stream_names_typed_or_stored_with_the_corpus_are_escaped(cli: Cli) -> None:
    """A stray row whose stream, type and body carry the corpus (written into the file
    with sqlite3, as a hostile hand would), and ids typed with it."""
    session, _ = _run(cli)
    with sqlite3.connect(cli.db) as db:
        db.execute(
            "INSERT INTO events (stream, seq, type, recorded_at, body, prev_hash, hash) "
            "VALUES (?, 0, ?, 0, ?, ?, ?)",
            (PAYLOAD, PAYLOAD, PAYLOAD.encode(), PAYLOAD, PAYLOAD),
        )
    cli("log", "sessions")
    cli("log", "sessions", "--json")
    out, _ = cli("log", "verify", ok=(1,))
    assert "FAULT" in out and "\\x1b[2K" in out, out
    cli("log", "verify", "--json", ok=(1,))
    cli("log", "show", PAYLOAD, ok=(0, 2))
    cli("sessions", ok=(0, 2))
    for typed in (
        ("replay", PAYLOAD),
        ("replay", session),
        ("approve", PAYLOAD, PAYLOAD),
        ("deny", session, PAYLOAD),
        ("resume", PAYLOAD),
        ("approvals", PAYLOAD),
        ("log", "show", "x" + PAYLOAD),
        ("otel", "metrics", PAYLOAD),
        ("policy", "--session", PAYLOAD),
    ):
        cli(*typed, ok=(0, 1, 2))


def on_a_terminal(args: list[str], tmp_path: Path, answer: bytes = b"") -> tuple[int, str]:
    """Run ``skillog ARGS`` with a real pseudo-terminal as stdin, stdout and stderr;
    ``answer`` is typed at the first ``[y/s/p/x/N]``. The exit code and all it showed."""
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "SKILLOG_CONFIG": str(tmp_path / "config.yaml"),
    }
    env.pop("XDG_CONFIG_HOME", None)
    main_fd, tty_fd = pty.openpty()
    command = [sys.executable, "-m", "orchestrator.cli", *args]
    proc = subprocess.Popen(command, stdin=tty_fd, stdout=tty_fd, stderr=tty_fd, env=env)
    os.close(tty_fd)
    seen = b""
    try:
        while True:
            ready, _, _ = select.select([main_fd], [], [], 60)
            assert ready, seen
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if answer and b"[y/s/p/x/N]" in seen:
                os.write(main_fd, answer)
                answer = b""
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main_fd)
    return code, seen.decode().replace("\r\n", "\n")  # the terminal's own line ends


def test_the_terminal_approval_prompt_shows_the_arguments_escaped(tmp_path: Path) -> None:
    """``skillog run`` on a terminal asks ``[y/s/p/x/N]``: through a real pseudo-terminal,
    the question shows the model's arguments escaped."""
    skill = tmp_path / "skills" / "corpus"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL.format(description="Echoes a file name.", payload=""))
    (skill / "scripts" / "echo.py").write_text(SCRIPT)
    turns = [
        {"tool_calls": [{"name": "skills.load", "arguments": {"names": ["corpus"]}}]},
        {
            "tool_calls": [
                {
                    "name": "skills.run_script",
                    "arguments": {"path": "scripts/echo.py", "args": [PAYLOAD]},
                }
            ]
        },
        {"text": "Done."},
    ]
    (tmp_path / "turns.json").write_text(json.dumps({"turns": turns}))
    db = tmp_path / "log.db"
    code, text = on_a_terminal(
        [
            "run", "go", "--model", f"scripted:{tmp_path / 'turns.json'}",
            "--skills", str(skill), "--tier", "third-party", "--project", str(tmp_path),
            "--db", str(db),
        ],
        tmp_path,
        answer=b"n\n",
    )  # fmt: skip
    assert code in (0, 1), text
    question = text[: text.index("[y/s/p/x/N]")]
    assert "\\x1b[2K" in question and "\\u202e" in question, question
    assert raw_controls(text) == [], text

    # `log export` is the stored bytes: to a terminal it refuses, to a pipe it writes
    code, text = on_a_terminal(["log", "export", "--db", str(db)], tmp_path)
    assert code == 2 and "--out FILE" in text and raw_controls(text) == [], text
    piped = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "log", "export", "--db", str(db)],
        capture_output=True,
        check=True,
    )
    assert "\u202e".encode() in piped.stdout  # byte for byte, as stored
