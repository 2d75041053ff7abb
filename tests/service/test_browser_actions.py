"""Acting on sessions from the console in a real headless Chromium: fork from an event
(the workers continue the fork), cancel after an in-page confirmation (the result
stays until dismissed), the audit report's way back, buttons disabled while the
server cannot be reached and enabled again when it can; a session submitted elsewhere
appearing in the open list; in the approvals inbox, a request arriving live and
approved together with another with one reason."""

from __future__ import annotations

import time

import httpx2 as httpx

from .test_browser import logged_in, server, shot

__all__ = ["server"]  # the fixture, shared with test_browser


def _view(url: str, token: str, session: str) -> dict[str, object]:
    view: dict[str, object] = httpx.get(
        f"{url}/api/sessions/{session}",
        headers={"authorization": f"Bearer {token}"},
        trust_env=False,
    ).json()
    return view


def _wait_status(url: str, token: str, session: str, status: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        view = _view(url, token, session)
        if view["status"] == status or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def _submit(url: str, token: str, task: str) -> str:
    made = httpx.post(
        url + "/api/sessions",
        json={"task": task},
        headers={"authorization": f"Bearer {token}"},
        trust_env=False,
    )
    assert made.status_code == 201, made.text
    session: str = made.json()["session_id"]
    return session


def test_fork_cancel_and_offline_in_chromium(server: tuple[str, dict[str, str]]) -> None:
    from playwright.sync_api import expect

    url, tokens = server
    session = _submit(url, tokens["ada"], "act on me")
    with logged_in(url, tokens["ada"]) as page:
        page.goto(f"{url}/console/sessions/{session}")
        expect(page.locator("#approvals article.approval")).to_have_count(1, timeout=30_000)
        # Fork right after the first model answer: the fork goes on in the workers.
        page.click("#raw > summary")  # every event, each with its fork button
        answer = page.locator('#events li[data-type="model.responded"]').first
        seq = answer.get_attribute("data-seq")
        answer.locator("button.fork-here").click()
        forked = page.locator("#notices .notice.ok")
        expect(forked).to_contain_text(f"forked at seq {seq} into ")
        page.locator("#notices a.forked").click()
        expect(page.locator("#session")).to_have_count(1)
        fork = page.url.rsplit("/", 1)[1]
        assert fork != session
        expect(page.locator("#approvals article.approval")).to_have_count(1, timeout=30_000)
        expect(page.locator('#events li[data-type="session.forked"]')).to_have_count(1)

        # Cancel the original: asked in the page first, then recorded.
        page.goto(f"{url}/console/sessions/{session}")
        page.fill("#action-reason", "not needed")
        page.click('#actions button[data-action="cancel"]')
        expect(page.locator("#confirm")).to_be_visible()
        page.click("#confirm-no")
        expect(page.locator("#confirm")).to_be_hidden()
        assert _view(url, tokens["ada"], session)["status"] == "awaiting_approval"
        page.click('#actions button[data-action="cancel"]')
        page.click('#actions button[data-action="cancel-yes"]')
        done = page.locator("#notices .notice.ok")
        expect(done).to_have_text("cancelled: cancelled by ada: not neededDismiss")
        expect(page.locator('#events li[data-type="session.ended"]')).to_have_count(1)
        expect(page.locator("#status")).to_have_text("ended (cancelled)")
        expect(page.locator('#actions button[data-action="cancel"]')).to_be_disabled()
        page.wait_for_timeout(2500)  # stays until dismissed
        expect(done).to_have_count(1)
        shot(page, "console-actions")
        done.locator("button.dismiss").click()
        expect(page.locator("#notices .notice")).to_have_count(0)
        view = _wait_status(url, tokens["ada"], session, "ended")
        assert view["ended_reason"] == "cancelled"

        # The server out of reach: actions disabled (and said so), enabled when back.
        page.goto(f"{url}/console/sessions/{fork}")
        fork_button = page.locator('#actions button[data-action="fork"]')
        expect(fork_button).to_be_enabled()
        page.context.set_offline(True)
        expect(page.locator("#offline")).to_be_visible(timeout=30_000)
        expect(fork_button).to_be_disabled()
        expect(page.locator("article.approval button.decide").first).to_be_disabled()
        page.context.set_offline(False)
        expect(page.locator("#offline")).to_be_hidden(timeout=30_000)
        expect(fork_button).to_be_enabled()
        expect(page.locator("article.approval button.decide").first).to_be_enabled()

        # From the audit report back to the session.
        page.click("#audit")
        page.click("#back")
        expect(page).to_have_url(f"{url}/console/sessions/{fork}")


def test_bulk_approve_live_inbox_in_chromium(server: tuple[str, dict[str, str]]) -> None:
    from playwright.sync_api import expect

    url, tokens = server
    with logged_in(url, tokens["ada"]) as page:
        # The sessions list shows a session submitted elsewhere without a reload.
        expect(page.locator("#sessions tbody tr")).to_have_count(0)
        sessions = [_submit(url, tokens["ada"], "bulk 1")]
        row = page.locator(f'#sessions tr[data-session="{sessions[0]}"]')
        expect(row).to_have_count(1, timeout=30_000)
        expect(row.locator("td.task a")).to_have_text("bulk 1")
        page.goto(url + "/console/approvals")
        articles = page.locator("#inbox article.approval")
        expect(articles).to_have_count(1, timeout=30_000)
        sessions.append(_submit(url, tokens["ada"], "bulk 2"))
        expect(articles).to_have_count(2, timeout=30_000)  # arrived live
        page.check("#pick-all")
        page.fill("#bulk-reason", "both fine")
        page.click('#bulk button[data-verdict="approve"]')
        expect(page.locator("#notices .notice.ok")).to_contain_text("approved 2 request(s)")
        for n in range(2):
            expect(articles.nth(n).locator(".message")).to_have_text("approved by ada")
        shot(page, "console-bulk")
        for session in sessions:
            assert _wait_status(url, tokens["ada"], session, "ended")["status"] == "ended"
        events = httpx.get(
            f"{url}/api/sessions/{sessions[0]}/events?limit=1000",
            headers={"authorization": f"Bearer {tokens['ada']}"},
            trust_env=False,
        ).json()["events"]
        (decision,) = [e for e in events if e["type"].startswith("approval.resolved")]
        assert decision["body"]["reason"] == "both fine"
        assert decision["body"]["decided_by"] == "ada"
        # The trace carries what the server computes: cached tokens and cost of each
        # model call, each prompt's diff against the previous request, script output.
        page.goto(f"{url}/console/sessions/{sessions[0]}")
        trace = page.locator("#trace")
        expect(trace.locator(".node.model .meta .cost")).to_have_count(3, timeout=30_000)
        expect(trace.locator(".node.model .meta .cost").first).to_contain_text(
            "cached 0 read / 0 written · cost no price"
        )
        expect(trace.locator(".node.prompt > .diff")).to_have_count(3)
        trace.locator(".node.prompt").nth(1).locator("> summary").click()
        diff = trace.locator(".node.prompt > .diff").nth(1)
        diff.locator("> summary").click()
        expect(diff.locator("pre")).to_contain_text("+    <active_skills>")
        expect(diff.locator("pre")).to_contain_text("&lt;script&gt;")  # as text, escaped once
        output = trace.locator(".output")
        expect(output).to_have_count(1)
        trace.evaluate("t => t.querySelectorAll('details.node').forEach(d => { d.open = true; })")
        output.locator("> summary").click()
        expect(output.locator("pre")).to_have_text("hi ['<i>x</i>']\n")
        assert page.locator("#trace script, #trace img, #trace i").count() == 0
        shot(page, "console-trace")
