"""The console's pages over HTTP: login sets a cookie scripts cannot read, and every
value from the log is escaped (the browser test checks the same in Chromium)."""

from __future__ import annotations

from .conftest import HOSTILE, Service
from .test_api import submit, wait_for


async def test_login_cookie_and_pages_escape_everything(service: Service) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    async with service.client(None) as browser:
        assert (await browser.get("/console/login")).status_code == 200
        bad = await browser.post("/api/login", json={"token": "skl_wrong"})
        assert bad.status_code == 401 and bad.json()["field"] == "$.token"
        ok = await browser.post("/api/login", json={"token": service.tokens["victor"]})
        assert ok.status_code == 200 and ok.json()["name"] == "victor"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        pages = [
            await browser.get("/console"),
            await browser.get(f"/console/sessions/{session}"),
            await browser.get("/console/approvals"),
            await browser.get(f"/console/sessions/{session}/approvals"),
            await browser.get(f"/console/sessions/{session}/audit"),
        ]
        for page in pages:
            assert page.status_code == 200, page.text
            # The audit report carries the recorded prompts (the hostile description
            # among them) as a JSON data block with every "<" escaped: no markup in it.
            markup, _, data = page.text.partition('<script type="application/json"')
            assert "<" not in data.partition(">")[2].partition("</script>")[0]
            assert "<script>window" not in markup and "onerror=" not in markup.replace(
                "onerror=&quot;", ""
            )
            assert "'unsafe-inline'" not in page.headers["content-security-policy"]
        session_page, approvals, audit = pages[1], pages[2], pages[4]
        assert "re-rendered from the log byte for byte" in audit.text
        assert "<i>x</i>" not in audit.text and "skills.run_script" in audit.text
        assert HOSTILE.replace("<", "&lt;").replace(">", "&gt;").split('"')[0] in session_page.text
        assert "&lt;i&gt;x&lt;/i&gt;" in approvals.text  # the script's argument, as text
        assert "skills.run_script" in approvals.text and "user" in approvals.text
        # A viewer's buttons are disabled (and the API refuses anyway: test_api).
        assert 'data-verdict="approve" disabled' in approvals.text
        # Logging out clears the cookie: the console asks to log in again.
        await browser.post("/api/logout", json={})
        again = await browser.get("/console")
        assert again.status_code == 303
    async with service.client(None) as stranger:
        # A cookie-less client gets no data from any page or fragment.
        for path in ("/console", f"/console/sessions/{session}", "/openapi.json"):
            assert (await stranger.get(path)).status_code in (303, 401)
        assert (await stranger.get("/static/console.js")).status_code == 200
        assert (await stranger.get("/static/..%2F_app.py")).status_code == 404
