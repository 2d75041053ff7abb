"""MCP forms answered through the API (issue 24, item 10): a session served by the
service's own worker has nobody in the process to ask, so its server's form waits;
``GET /api/approvals`` lists it with the server's message and schema, and ``POST
/api/sessions/{id}/forms/{call}/answer`` answers it (``decided_by`` the token's name);
values that do not fit are a 422 naming the field, an answer to a form no longer
pending a 409, nothing written either way. The session verifies and re-drives."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from orchestrator._events import CODEC, McpElicitationAnswered, ToolCompleted
from orchestrator._streams import forms_stream

from .conftest import running_service
from .test_api import submit, wait_for
from .test_mcp_progress import with_server

FORM = {
    "type": "object",
    "properties": {"name": {"type": "string", "title": "<img src=x onerror=alert(1)>"},
                   "colours": {"type": "array",
                   "items": {"type": "string", "enum": ["red", "green"]}}},
    "required": ["name"],
}  # fmt: skip
TURNS = f"""\
turns:
  - tool_calls: [{{id: f1, name: mcp__modern__form, arguments: {{schema: {json.dumps(FORM)}}}}}]
  - text: "Done."
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_form_answered_through_the_api(
    tmp_path: Path,
    service_env: tuple[Path, dict[str, str]],
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    config, tokens = service_env
    with_server(config)
    db = request.getfixturevalue("pg_dsn") if backend == "postgres" else None
    async with running_service(tmp_path, config, tokens, turns=TURNS, db=db) as service:
        session = await submit(service, task="fill the form")
        async with service.client("victor") as viewer, service.client("april") as approver:
            with trio.fail_after(60):
                while True:
                    forms = (await viewer.get("/api/approvals")).json()["forms"]
                    if forms:
                        break
                    await trio.sleep(0.05)
            (form,) = forms
            assert (form["session_id"], form["call_id"], form["index"]) == (session, "f1", 0)
            assert form["message"] == "Who are you?" and form["schema"] == FORM
            # the console's inbox renders the form from its schema, the server's words escaped
            inbox = (await viewer.get("/console/approvals/inbox")).text
            assert 'class="approval form"' in inbox and 'data-field="colours"' in inbox
            assert '<input type="checkbox" class="choice" value="red">' in inbox
            assert "&lt;img src=x onerror=alert(1)&gt;" in inbox and "<img" not in inbox
            assert "disabled" in inbox  # a viewer sees the buttons, and may not press them
            url = f"/api/sessions/{session}/forms/f1/answer"
            # a viewer may not answer; hostile values are refused, naming the field
            assert (await viewer.post(url, json={"action": "decline"})).status_code == 403
            for values, said in [
                ({"name": 7}, "7 is not of type 'string'"),
                ({"name": "Ada", "admin": True}, "no field 'admin'"),
                ({"name": "\u001b]0;pwned\u0007"}, "control character U+001B"),
                ({"name": "x" * 9000}, "at most 8192"),
                ({"name": "Ada", "colours": ["blue"]}, "'blue' is not one of"),
            ]:
                refused = await approver.post(url, json={"action": "accept", "values": values})
                assert refused.status_code == 422, refused.text
                assert said in refused.json()["error"] and refused.json()["field"] == "values"
            assert [e async for e in service.store.read(forms_stream(session))] == []
            answer = {"action": "accept", "values": {"name": "Ada", "colours": ["red"]}}
            answered = await approver.post(url, json=answer)
            assert answered.status_code == 200, answered.text
            assert answered.json()["decided_by"] == "april"
            await wait_for(service, session, "ended")
            late = await approver.post(url, json={"action": "decline"})
            assert late.status_code == 409, late.text
            assert (await viewer.get("/api/approvals")).json()["forms"] == []
            verified = (await viewer.get(f"/api/sessions/{session}/verify")).json()
            assert verified["ok"], verified
        bodies = [CODEC.decode(e) async for e in service.store.read(session)]
    (recorded,) = [b for b in bodies if isinstance(b, McpElicitationAnswered)]
    assert (recorded.decided_by, recorded.answer) == ("april", answered.json()["answer"])
    (done,) = [json.loads(b.content) for b in bodies if isinstance(b, ToolCompleted)]
    assert done == {"action": "accept", "content": {"name": "Ada", "colours": ["red"]}}
    skillog = Path(sys.executable).with_name("skillog")
    replayed = await trio.run_process(
        [str(skillog), "replay", session, "--db", str(service.db), "--redrive"],
        capture_stdout=True,
        check=False,
    )
    out = replayed.stdout.decode()
    assert replayed.returncode == 0 and "re-drive: the current code reproduces all" in out, out


def test_a_form_filled_in_the_console_inbox_in_chromium(tmp_path: Path) -> None:
    """The approvals page shows a pending form live, rendered from its schema; filled
    in (a text field, a choice) and submitted, the session takes the answer."""
    import os

    import httpx2 as httpx
    from chromium import need_chromium
    from playwright.sync_api import expect

    from orchestrator.service import new_token
    from orchestrator.skills._config import add_service_token

    from .conftest import write_skill
    from .test_browser import logged_in
    from .test_cli_serve import start, stop

    need_chromium()
    config = tmp_path / "config.yaml"
    token, entry = new_token("ada", ("admin",))
    add_service_token(str(config), entry)
    with_server(config)
    (tmp_path / "turns.yaml").write_text(TURNS)
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path / "home")}
    model = f"scripted:{tmp_path / 'turns.yaml'}"
    proc, url = start(tmp_path, env, "--model", model, "--skills", str(write_skill(tmp_path)))
    api = {"authorization": f"Bearer {token}"}
    try:
        with logged_in(url, token) as page:
            page.goto(url + "/console/approvals")
            made = httpx.post(url + "/api/sessions", json={"task": "fill it"}, headers=api)
            session = made.json()["session_id"]
            form = page.locator(f"#inbox article.form[data-session='{session}']")
            expect(form).to_have_count(1, timeout=30_000)  # arrived live
            expect(form.locator("pre")).to_have_text("Who are you?")
            form.locator("div.field[data-field='name'] input.value").fill("Ada")
            form.locator("div.field[data-field='colours'] input[value='green']").check()
            form.locator("button[data-action='accept']").click()
            expect(form.locator(".message")).to_contain_text("answered by ada")
            deadline = 30.0
            while deadline > 0:
                view = httpx.get(url + f"/api/sessions/{session}", headers=api).json()
                if view["status"] == "ended":
                    break
                page.wait_for_timeout(100)
                deadline -= 0.1
            events = httpx.get(url + f"/api/sessions/{session}/events", headers=api).json()
    finally:
        stop(proc)
    (answered,) = [e for e in events["events"] if e["type"] == "mcp.elicitation_answered"]
    assert answered["body"]["decided_by"] == "ada"
    assert json.loads(answered["body"]["content"]) == {"name": "Ada", "colours": ["green"]}
