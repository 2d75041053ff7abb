"""Cancel and resume from the console in a real headless Chromium, against sessions the
server's own worker drives: cancel while the model streams its answer (cut, recorded,
the log whole), resume a session that ended on a model error (it goes on in a new
session, linked from the notice, which the worker finishes) and resume one whose
approval was just decided (it goes on and ends)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from chromium import need_chromium

from orchestrator.service import new_token
from orchestrator.skills._config import add_service_token

from .conftest import HOSTILE, write_skill
from .test_browser import logged_in
from .test_browser_actions import _submit, _view, _wait_status
from .test_cancel_driving import SLOW_MODEL
from .test_cli_serve import start, stop
from .test_resume import ANSWERING, FAILING, SLOW_END


@pytest.fixture
def driving(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """A server whose scripted model reads ``turns.yaml`` afresh for each session run
    (rewritten by the test); an admin token."""
    need_chromium()
    config = tmp_path / "config.yaml"
    token, entry = new_token("ada", ("admin",))
    add_service_token(str(config), entry)
    skill = write_skill(tmp_path, HOSTILE)
    turns = tmp_path / "turns.yaml"
    turns.write_text(SLOW_MODEL)
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path / "home")}
    proc, url = start(
        tmp_path, env,
        "--model", f"scripted:{turns}", "--skills", str(skill), "--poll-ms", "100",
    )  # fmt: skip
    try:
        yield url, token, turns
    finally:
        stop(proc)


def _types(url: str, token: str, session: str) -> list[str]:
    events = httpx.get(
        f"{url}/api/sessions/{session}/events",
        headers={"authorization": f"Bearer {token}"},
        trust_env=False,
    ).json()["events"]
    return [e["type"].split("@")[0] for e in events]


def _verifies(url: str, token: str, session: str) -> bool:
    verdict = httpx.get(
        f"{url}/api/sessions/{session}/verify",
        headers={"authorization": f"Bearer {token}"},
        trust_env=False,
    ).json()
    return bool(verdict["ok"])


def test_cancel_and_resume_while_driven_in_chromium(driving: tuple[str, str, Path]) -> None:
    from playwright.sync_api import expect

    url, token, turns = driving
    with logged_in(url, token) as page:
        # Cancel while the worker streams the model's answer.
        session = _submit(url, token, "cut me off")
        page.goto(f"{url}/console/sessions/{session}")
        expect(page.locator('#events li[data-type="prompt.rendered"]')).to_have_count(
            1, timeout=30_000
        )
        expect(page.locator("#preview")).to_contain_text("This answer streams")  # streaming
        page.click('#actions button[data-action="cancel"]')
        page.click('#actions button[data-action="cancel-yes"]')
        expect(page.locator("#notices .notice.ok")).to_contain_text("cancelled: cancelled by ada")
        expect(page.locator("#status")).to_have_text("ended (cancelled)", timeout=30_000)
        expect(page.locator('#actions button[data-action="resume"]')).to_be_disabled()
        kinds = _types(url, token, session)
        assert kinds.count("model.interrupted") == 1 and kinds[-1] == "session.ended", kinds
        assert "model.responded" not in kinds
        assert _verifies(url, token, session)

        # A model error ends a session; once the model answers, Resume goes on in a
        # new session forked before the failing turn.
        turns.write_text(FAILING)
        failed = _submit(url, token, "fail, then go on")
        assert _wait_status(url, token, failed, "ended")["ended_reason"] == "error"
        turns.write_text(ANSWERING)
        page.goto(f"{url}/console/sessions/{failed}")
        resume = page.locator('#actions button[data-action="resume"]')
        expect(resume).to_be_enabled()
        resume.click()
        expect(page.locator("#notices .notice.ok")).to_contain_text("goes on in ")
        page.locator("#notices a.continued").click()
        expect(page.locator('#events li[data-type="session.forked"]')).to_have_count(1)
        expect(page.locator("#status")).to_have_text("ended (completed)", timeout=30_000)
        went_on = page.url.rsplit("/", 1)[1]
        assert went_on != failed and _verifies(url, token, went_on)

        # Approved in the page, then resumed: it goes on under the worker and ends.
        turns.write_text(SLOW_END)
        waiting = _submit(url, token, "approve, then resume")
        page.goto(f"{url}/console/sessions/{waiting}")
        request = page.locator("article.approval")
        expect(request).to_have_count(1, timeout=30_000)
        request.locator('button[data-verdict="approve"]').click()
        expect(request.locator(".message")).to_have_text("approved by ada")
        page.click('#actions button[data-action="resume"]')
        expect(page.locator("#notices .notice.ok")).to_contain_text("handed back to the workers")
        expect(page.locator("#status")).to_have_text("ended (completed)", timeout=30_000)
        assert _view(url, token, waiting)["ended_reason"] == "completed"
        assert _verifies(url, token, waiting)
