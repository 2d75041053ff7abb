"""The console in a real headless Chromium (Debian's, driven by Playwright; never a
downloaded browser): log in with a token, submit a task, watch its events arrive,
approve the script from the page and see the session finish; a hostile skill
description renders inert; a viewer's token cannot approve."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from chromium import ARGS, CHROMIUM, need_chromium

from orchestrator.service import new_token
from orchestrator.skills._config import add_service_token

from .conftest import HOSTILE, TURNS, write_skill
from .test_cli_serve import start, stop

SHOTS = Path(__file__).parents[2] / "docs" / "img"


def shot(page: object, name: str) -> None:
    """With SKILLOG_SCREENSHOTS=1, the page as docs/img/NAME.png (docs/service.md shows
    them; re-taken by running the browser tests so)."""
    if os.environ.get("SKILLOG_SCREENSHOTS") == "1":
        SHOTS.mkdir(exist_ok=True)
        page.set_viewport_size({"width": 1100, "height": 760})  # type: ignore[attr-defined]
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    need_chromium()
    config = tmp_path / "config.yaml"
    tokens = {}
    for name, roles in (("ada", ("admin",)), ("vic", ("viewer",))):
        tokens[name], entry = new_token(name, roles)  # type: ignore[arg-type]
        add_service_token(str(config), entry)
    skill = write_skill(tmp_path, HOSTILE)
    (tmp_path / "turns.yaml").write_text(TURNS)
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path / "home")}
    proc, url = start(
        tmp_path, env,
        "--model", f"scripted:{tmp_path / 'turns.yaml'}", "--skills", str(skill),
        "--poll-ms", "100",
    )  # fmt: skip
    try:
        yield url, tokens
    finally:
        stop(proc)


def test_console_in_chromium(server: tuple[str, dict[str, str]]) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, tokens = server
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(url + "/console")
            expect(page).to_have_url(url + "/console/login")
            page.fill("#token", tokens["ada"])
            page.click("#login button")
            expect(page).to_have_url(url + "/console")
            page.fill("#task", "greet <b>me</b>")
            page.click("#submit button")
            page.wait_for_url(url + "/console/sessions/*")
            session = page.url.rsplit("/", 1)[1]
            # Events arrive live, up to the suspension for the script's approval.
            expect(page.locator('#events li[data-type="session.suspended"]')).to_have_count(1)
            expect(page.locator("#live")).to_have_text("live")
            request = page.locator("article.approval")
            expect(request).to_have_count(1, timeout=30_000)
            expect(request).to_contain_text("skills.run_script")
            expect(request).to_contain_text("<i>x</i>")  # the argument, as text
            expect(request.locator("dd").nth(3)).to_have_text("user")
            request.locator("input.reason").fill("looks fine")
            # "Always for this skill in this session": recorded as approval.remembered.
            options = request.locator("select.remember option")
            assert options.evaluate_all("os => os.map(o => o.value)")[:2] == ["", "skill"]
            request.locator("select.remember").select_option("skill")
            request.locator('button[data-verdict="approve"]').click()
            expect(request.locator(".message")).to_have_text("approved by ada")
            # The in-process worker continues the session; its events arrive live.
            ended = page.locator('#events li[data-type="session.ended"]')
            expect(ended).to_have_count(1, timeout=30_000)
            expect(page.locator("#status")).to_have_text("ended (completed)")
            # The trace: three turns, each with its model call (duration, tokens); the
            # script's call with its effect class, outcome and the approval inside it.
            trace = page.locator("#trace")
            expect(trace.locator(".node.turn")).to_have_count(3)
            expect(trace.locator(".node.model")).to_have_count(3)
            expect(trace.locator(".node.model .meta").first).to_contain_text("out tokens")
            script = trace.locator('.node.tool:has(> summary b:text-is("skills.run_script"))')
            expect(script).to_have_count(1)
            expect(script.locator("> summary .meta")).to_contain_text(" ms · ok")
            expect(script.locator(".approval-resolved > summary .meta")).to_have_text(
                "approved by ada: looks fine"
            )
            expect(trace.locator(".payload").first).not_to_have_attribute("open", "")
            expect(trace).to_contain_text("Done: <script>alert(1)</script>")
            assert page.locator("#trace script, #trace img").count() == 0
            shot(page, "console-session")
            # Hostile text from the skill and the model is inert text.
            catalog = page.locator("#catalog li")
            expect(catalog).to_contain_text(HOSTILE)
            assert page.locator("#catalog img, #catalog script, #events script").count() == 0
            assert page.evaluate("window.__pwned") is None and dialogs == []
            expect(page.locator("#events")).to_contain_text("<script>alert(1)</script>")
            # The events on the page are the log's, each once, in order.
            log = httpx.get(
                f"{url}/api/sessions/{session}/events?limit=1000",
                headers={"authorization": f"Bearer {tokens['ada']}"}, trust_env=False,
            ).json()["events"]  # fmt: skip
            seqs = page.eval_on_selector_all("#events li", "els => els.map(e => +e.dataset.seq)")
            assert seqs == [e["seq"] for e in log]
            (grant,) = [e for e in log if e["type"].startswith("approval.remembered")]
            assert grant["body"]["scope"] == "skill" and grant["body"]["decided_by"] == "ada"
            # The audit report: proven from the log, hostile text still text.
            page.click("#audit")
            expect(page.locator("#verdict")).to_contain_text("byte for byte")
            expect(page.locator("#timeline")).to_contain_text("approved")
            expect(page.locator("#timeline")).to_contain_text("ada")
            assert page.locator("#timeline script, #timeline img").count() == 0
            assert page.evaluate("window.__pwned") is None and dialogs == []

            # A viewer sees a pending request but cannot approve it.
            second = httpx.post(
                url + "/api/sessions", json={"task": "again"},
                headers={"authorization": f"Bearer {tokens['ada']}"}, trust_env=False,
            ).json()["session_id"]  # fmt: skip
            viewer = browser.new_context().new_page()
            viewer.goto(url + "/console/login")
            viewer.fill("#token", tokens["vic"])
            viewer.click("#login button")
            expect(viewer).to_have_url(url + "/console")
            viewer.goto(f"{url}/console/sessions/{second}")
            button = viewer.locator('article.approval button[data-verdict="approve"]')
            expect(button).to_have_count(1, timeout=30_000)
            expect(button).to_be_disabled()
            call = viewer.locator("article.approval").get_attribute("data-call")
            status = viewer.evaluate(
                """async ([s, c]) => (await fetch(`/api/sessions/${s}/approvals/${c}/approve`,
                {method: "POST", headers: {"content-type": "application/json"},
                 body: "{}"})).status""",
                [second, call],
            )
            assert status == 403
            assert dialogs == []
        finally:
            browser.close()


@contextmanager
def logged_in(url: str, token: str) -> Iterator[Any]:
    """A Chromium page logged in to the console with ``token``."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(url + "/console/login")
            page.fill("#token", token)
            page.click("#login button")
            expect(page).to_have_url(url + "/console")
            yield page
        finally:
            browser.close()


def test_admin_tokens_page_and_logout_in_chromium(server: tuple[str, dict[str, str]]) -> None:
    """An admin creates a token in the console (shown once, and it works), revokes it
    (refused from then on); after logging out, the page's cookie opens nothing."""
    from playwright.sync_api import expect

    url, tokens = server
    with logged_in(url, tokens["ada"]) as page:
        page.click("nav a[href='/console/tokens']")
        expect(page.locator("#tokens tbody tr")).to_have_count(2)
        page.fill("#token-name", "ci")
        page.check("input.role[value='submitter']")
        page.click("#new-token button")
        expect(page.locator("#message")).to_contain_text("created ci")
        created = page.locator("#new-token-value").text_content() or ""
        assert created.startswith("skl_")
        who = httpx.get(url + "/api/whoami", headers={"authorization": f"Bearer {created}"})
        assert who.json() == {"name": "ci", "roles": ["submitter", "viewer"]}
        page.click("#tokens tr[data-name='ci'] button.revoke")
        expect(page.locator("#message")).to_contain_text("revoked ci")
        expect(page.locator("#tokens tr[data-name='ci']")).to_have_count(0)
        shot(page, "console-tokens")
        gone = httpx.get(url + "/api/whoami", headers={"authorization": f"Bearer {created}"})
        assert gone.status_code == 401
        cookie = next(c for c in page.context.cookies() if c["name"] == "skillog_console")
        assert cookie["value"] != tokens["ada"] and cookie["httpOnly"]
        page.click("#logout")
        expect(page).to_have_url(url + "/console/login")
        stale = httpx.get(
            url + "/api/whoami", headers={"cookie": f"skillog_console={cookie['value']}"}
        )
        assert stale.status_code == 401
        # A viewer sees no Tokens link, and the page refuses it.
        page.fill("#token", tokens["vic"])
        page.click("#login button")
        expect(page).to_have_url(url + "/console")
        expect(page.locator("nav a[href='/console/tokens']")).to_have_count(0)
        assert page.goto(url + "/console/tokens").status == 403  # type: ignore[union-attr]


def test_live_inbox_task_filters_and_unknown_session_in_chromium(
    server: tuple[str, dict[str, str]],
) -> None:
    """An approval requested while the inbox is open appears there without a reload and
    is approved from it; the sessions list shows the task and filters by it; an unknown
    session gets a page of its own with the way back."""
    from playwright.sync_api import expect

    url, tokens = server
    api = {"authorization": f"Bearer {tokens['ada']}"}
    with logged_in(url, tokens["ada"]) as page:
        page.goto(url + "/console/approvals")
        expect(page.locator("#inbox p.none")).to_have_count(1)
        made = httpx.post(url + "/api/sessions", json={"task": "greet the inbox"}, headers=api)
        session = made.json()["session_id"]
        article = page.locator(f"#inbox article.approval[data-session='{session}']")
        expect(article).to_have_count(1, timeout=30_000)  # arrived live
        expect(page.locator("#inbox p.none")).to_have_count(0)
        article.locator("input.reason").fill("looks fine")
        article.locator("button[data-verdict='approve']").click()
        expect(article.locator(".message")).to_contain_text("approved by ada")
        shot(page, "console-approvals")
        page.goto(url + "/console?q=INBOX")
        expect(page.locator("#sessions tbody tr")).to_have_count(1)
        expect(page.locator("#sessions td.task a")).to_have_text("greet the inbox")
        shot(page, "console-sessions")
        page.goto(url + "/console?q=nothing+like+this")
        expect(page.locator("#sessions tbody tr")).to_have_count(0)
        expect(page.locator("#count")).to_have_text("0 shown")
        missing = page.goto(url + "/console/sessions/no-such-session")
        assert missing is not None and missing.status == 404
        expect(page.locator("#unknown h2")).to_have_text("No session no-such-session")
        page.click("#unknown a")
        expect(page).to_have_url(url + "/console")
