"""``skillog replay --html``: the audit report, run as a user types it, opened in a real
headless Chromium (Debian's, via Playwright): the verdict first, every prompt's bytes
on demand, nothing fetched, hostile log text inert, a tampered log's verdict says so."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from chromium import ARGS, CHROMIUM, need_chromium

from eventlog import open_sqlite_store
from replay import load_recording
from replay._request import RecordedRequests

Cli = Callable[..., tuple[int, str, str]]
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
TURNS = f"""\
turns:
  - text: "Loading <b>it</b>."
    tool_calls: [{{name: skills.load, arguments: {{names: [greet]}}}}]
  - text: "Running its script."
    tool_calls:
      - name: skills.run_script
        arguments: {{path: scripts/hi.py, args: ["<i>x</i>", {HOSTILE!r}]}}
  - text: "Done: <script>window.__pwned=3</script>"
"""


@pytest.fixture
def session(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A session recorded by `skillog run` with a skill whose description, the model's
    output and a script argument all hold markup: (db, session id)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    skill = tmp_path / "skills" / "greet"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: greet\ndescription: {HOSTILE!r}\n---\nRun scripts/hi.py <b>now</b>.\n"
    )
    (skill / "scripts" / "hi.py").write_text("import sys\nprint('hi', sys.argv[1:])\n")
    (tmp_path / "turns.yaml").write_text(TURNS)
    db = tmp_path / "log.db"
    code, out, err = cli(
        "run", "greet <b>me</b>", "--db", db, "--model", f"scripted:{tmp_path / 'turns.yaml'}",
        "--skills", skill, "--approve", "--project", tmp_path,
    )  # fmt: skip
    assert code == 0, out + err
    code, out, _ = cli("sessions", "--db", db, "--json")
    return db, out.split('"session":"')[1].split('"')[0]


def _report(cli: Cli, db: Path, sid: str, page: Path, *more: Any) -> tuple[int, str, str]:
    code, out, _ = cli("replay", sid, "--db", db, "--html", page, *more)
    return code, out, page.read_text(encoding="utf-8")


def test_the_report_proves_the_session_and_holds_no_markup_from_the_log(
    cli: Cli, session: tuple[Path, str], tmp_path: Path
) -> None:
    db, sid = session
    code, out, html = _report(cli, db, sid, tmp_path / "r.html", "--against-disk", tmp_path)
    assert code == 0, out
    assert "verdict: proven" in out and "✓ prompts" in out and "3 of 3 requests" in out
    assert html.index('id="verdict"') < html.index('id="timeline"') < html.index('id="prompts"')
    assert 'class="check ok" data-check="chain"' in html
    assert 'data-check="blobs"' in html and 'data-check="prompts"' in html
    assert "skills.run_script" in html and 'id="drift"' in html
    # Exactly two script elements (the data block and the page's own script), no
    # element from the log, and nothing in the data block that could close it.
    assert len(re.findall(r"<script\b", html)) == 2 and "<img" not in html and "<b>" not in html
    data = html.split('id="prompt-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and "\\u003cscript>" in data
    meta = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert meta is not None and "default-src 'none'" in meta.group(1)
    assert "unsafe-inline" not in meta.group(1) and "http" not in meta.group(1)


def _tamper(db: Path, sql: str) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql)
    conn.close()


@pytest.mark.parametrize(
    ("sql", "failed"),
    [
        # a recorded tool argument rewritten in place: the chain breaks at that event
        (
            "UPDATE events SET body = CAST(replace(body, 'scripts/hi.py', 'scripts/rm.py') "
            "AS BLOB) WHERE type LIKE 'tool.called%' AND CAST(body AS TEXT) LIKE '%run_script%'",
            "chain",
        ),
        # a message blob the model read, rewritten: its sha256 no longer matches
        (
            "UPDATE blobs SET data = CAST('{}' AS BLOB) WHERE CAST(data AS TEXT) LIKE "
            "'%Running its script.%' AND CAST(data AS TEXT) LIKE '{\"parts\"%'",
            "blobs",
        ),
    ],
)
def test_a_tampered_log_gives_a_failing_verdict_and_exit_1(
    cli: Cli, session: tuple[Path, str], tmp_path: Path, sql: str, failed: str
) -> None:
    db, sid = session
    _tamper(db, sql)
    code, out, html = _report(cli, db, sid, tmp_path / "t.html")
    assert code == 1, out
    assert f"✗ {failed}" in out and "verdict: NOT PROVEN" in out
    assert '<section id="verdict" class="fail"><h2>Verdict: NOT PROVEN' in html
    assert f'class="check fail" data-check="{failed}"' in html
    assert 'id="timeline"' in html  # what the log claims is still shown, marked unproven


def test_report_usage_errors(cli: Cli, session: tuple[Path, str], tmp_path: Path) -> None:
    db, sid = session
    page = tmp_path / "x.html"
    assert cli("replay", sid, "--db", db, "--html", page, "--timeline")[0] == 2
    assert cli("replay", sid, "--db", db, "--html", page, "--fork-at", "3")[0] == 2
    code, _, err = cli("replay", "nosuch", "--db", db, "--html", page)
    assert code == 2 and "no such session" in err and not page.exists()
    code, _, err = cli("replay", sid, "--db", db, "--html", tmp_path / "no" / "such" / "r.html")
    assert code == 2 and "Traceback" not in err
    assert "r.html: cannot write: no such directory: create it or choose another --html" in err


@pytest.fixture
def browser() -> Iterator[Any]:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str], list[str], list[str]]:
    """The page, with its console errors, every URL it requested and any dialog."""
    page = browser.new_page()
    errors: list[str] = []
    requests: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(page_file.as_uri(), wait_until="load")
    return page, errors, requests, dialogs


async def _recorded_request(db: Path, sid: str, turn: int) -> str:
    """The bytes of the request of ``turn`` as the blob store holds them."""
    from orchestrator._events import PromptRendered

    async with open_sqlite_store(db, readonly=True) as store:
        recording = await load_recording(store, sid)
        recorded = RecordedRequests()
        for body in recording.bodies:
            if isinstance(body, PromptRendered):
                recorded.extend([await store.get_blob(d) for d in body.new_message_digests])
                if body.turn == turn:
                    tail = await store.get_blob(body.tail_digest)
                    return recorded.request_bytes(tail).decode()
    raise AssertionError(f"no turn {turn}")


def test_the_report_in_chromium(
    cli: Cli, session: tuple[Path, str], tmp_path: Path, browser: Any
) -> None:
    from playwright.sync_api import expect

    db, sid = session
    good = tmp_path / "good.html"
    assert _report(cli, db, sid, good)[0] == 0
    page, errors, requests, dialogs = _open(browser, good)
    expect(page.locator("#verdict")).to_be_visible()
    expect(page.locator("#verdict h2")).to_have_text("Verdict: proven")
    expect(page.locator('#checks tr[data-check="prompts"]')).to_contain_text("byte for byte")
    # Prompts are collapsed; opening one shows its diff and its exact bytes.
    prompt = page.locator("details.prompt").nth(1)
    expect(prompt.locator("pre.bytes")).to_have_count(0)
    prompt.locator("summary").click()
    expect(prompt.locator("pre.diff")).to_contain_text("+ message 2:")
    expect(prompt.locator("pre.diff")).to_contain_text("Loading <b>it</b>.")
    shown = prompt.locator("pre.bytes").text_content()
    assert shown == trio.run(_recorded_request, db, sid, 2)
    # The hostile description is in that request (JSON-escaped), as text: no element,
    # no script ran.
    assert "<script>window.__pwned=1</script><img src=x onerror=" in shown
    page.locator("details.prompt").nth(2).locator("summary").click()
    expect(page.locator("#timeline")).to_contain_text("<i>x</i>")
    expect(page.locator("#timeline")).to_contain_text("Done: <script>window.__pwned=3</script>")
    assert page.locator("main img, body img, #timeline script, #prompts script").count() == 0
    assert page.evaluate("window.__pwned") is None and dialogs == []
    assert errors == [] and requests == [good.as_uri()]

    # A tampered log: the page says so, first thing.
    _tamper(
        db,
        "UPDATE events SET body = CAST(replace(body, 'hi.py', 'rm.py') AS BLOB) "
        "WHERE type LIKE 'tool.called%' AND CAST(body AS TEXT) LIKE '%run_script%'",
    )
    bad = tmp_path / "bad.html"
    assert _report(cli, db, sid, bad)[0] == 1
    page, errors, requests, dialogs = _open(browser, bad)
    expect(page.locator("#verdict h2")).to_have_text("Verdict: NOT PROVEN")
    chain = page.locator('#checks tr[data-check="chain"]')
    expect(chain).to_contain_text("✗")
    expect(chain).to_contain_text("modified: the event's content changed in place")
    assert errors == [] and requests == [bad.as_uri()] and dialogs == []


async def test_a_divergence_fails_only_the_prompts_row_and_shows_its_diff(
    recorded: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator._prompt
    from replay import audit_session, render_html

    monkeypatch.setattr(
        orchestrator._prompt,
        "BASE_RULES",
        orchestrator._prompt.BASE_RULES.replace("load it with", "activate it with"),
    )
    db, sid = recorded
    async with open_sqlite_store(db, readonly=True) as store:
        audit = await audit_session(store, sid, redrive=True)
    rows = {c.name: c for c in audit.checks}
    assert not audit.ok and list(rows) == ["chain", "grammar", "blobs", "prompts", "redrive"]
    assert rows["chain"].ok and rows["blobs"].ok and rows["prompts"].ok is False
    assert "0 of 5 requests" in rows["prompts"].details and "turn 1" in rows["prompts"].details
    assert all(p.proven is False for p in audit.prompts) and len(audit.prompts) == 5
    html = render_html(audit)
    assert "First divergence" in html and "activate it with" in html
    assert html.count("✗ differs") == 5
    # The mismatch is labelled what the log holds against what the code renders now;
    # each request's diff against the previous one, as such (the trace's labels).
    assert audit.divergence is not None
    assert audit.divergence.startswith(
        "--- recorded (blob store)\n+++ re-rendered (current code)\n"
    )
    steps = [p.tail_diff for p in audit.prompts if p.tail_diff]
    assert steps and all(
        d.startswith("--- the previous request\n+++ this request\n") for d in steps
    )


def test_a_checkpoint_row_trusted_by_key_and_failing_for_another_key(
    cli: Cli, recorded: tuple[Path, str], tmp_path: Path
) -> None:
    db, sid = recorded
    key, other = tmp_path / "signer.pem", tmp_path / "other.pem"
    assert cli("log", "keygen", "--out", key)[0] == 0
    assert cli("log", "keygen", "--out", other)[0] == 0
    checkpoints = tmp_path / "checkpoints.jsonl"
    assert cli("log", "checkpoint", "--db", db, "--key", key, "--out", checkpoints)[0] == 0
    page = tmp_path / "r.html"
    code, out, html = _report(
        cli, db, sid, page, "--checkpoint", checkpoints, "--key", f"{key}.pub"
    )
    assert code == 0, out
    assert "✓ checkpoint" in out and "signed by a trusted key" in out
    assert 'class="check ok" data-check="checkpoint"' in html
    code, out, html = _report(
        cli, db, sid, page, "--checkpoint", checkpoints, "--key", f"{other}.pub"
    )
    assert code == 1 and "✗ checkpoint" in out and "✓ chain" in out
    assert 'class="check fail" data-check="checkpoint"' in html
    code, out, _ = _report(cli, db, sid, page, "--checkpoint", checkpoints, "--tofu")
    assert code == 0 and "trusted on first use" in out
