"""The API against the real server: authentication, roles, limits, validation,
approvals (including a race), and a session driven to its end through the API."""

from __future__ import annotations

import json
import sqlite3

import trio

from eventlog import verify_stream
from orchestrator._events import CODEC, ApprovalResolved, ToolCompleted

from .conftest import Service


async def wait_for(service: Service, session: str, status: str) -> dict[str, object]:
    async with service.client("victor") as client:
        with trio.fail_after(30):
            while True:
                view = (await client.get(f"/api/sessions/{session}")).json()
                if view["status"] == status:
                    return view  # type: ignore[no-any-return]
                await trio.sleep(0.05)


async def submit(service: Service, who: str = "sam", task: str = "greet me") -> str:
    async with service.client(who) as client:
        response = await client.post("/api/sessions", json={"task": task})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]  # type: ignore[no-any-return]


async def test_no_token_wrong_token_and_removed_token(service: Service) -> None:
    async with service.client(None) as client:
        response = await client.get("/api/sessions")
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"].startswith("no token")
        wrong = await client.get("/api/sessions", headers={"authorization": "Bearer skl_nope"})
        assert wrong.status_code == 401
        basic = await client.get("/api/sessions", headers={"authorization": "Basic YTpi"})
        assert basic.status_code == 401
        # The console sends people to its login page instead.
        page = await client.get("/console")
        assert page.status_code == 303 and page.headers["location"] == "/console/login"
    async with service.client("victor") as client:
        assert (await client.get("/api/sessions")).status_code == 200
        # Remove victor's token from the file: refused on the next request (re-read).
        text = service.config.read_text()
        start = text.index("- name: victor")
        end = text.index("- name:", start + 1)
        service.config.write_text(text[:start] + text[end:])
        await trio.sleep(1.1)
        assert (await client.get("/api/sessions")).status_code == 401


async def test_first_requests_at_once_are_all_authenticated(service: Service) -> None:
    # The token file is read on the first request; those arriving meanwhile wait for it.
    statuses: list[int] = []
    async with service.client("victor") as client:

        async def whoami() -> None:
            statuses.append((await client.get("/api/whoami")).status_code)

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(whoami)
    assert statuses == [200] * 10


async def test_roles(service: Service) -> None:
    async with service.client("victor") as viewer:
        refused = await viewer.post("/api/sessions", json={"task": "x"})
        assert refused.status_code == 403 and "submitter" in refused.json()["error"]
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    async with service.client("victor") as viewer:
        call = (await viewer.get("/api/approvals")).json()["approvals"][0]["call_id"]
        refused = await viewer.post(f"/api/sessions/{session}/approvals/{call}/approve", json={})
        assert refused.status_code == 403 and "approver" in refused.json()["error"]
    async with service.client("sam") as submitter:
        url = f"/api/sessions/{session}/approvals/{call}/deny"
        assert (await submitter.post(url, json={})).status_code == 403
    async with service.client("april") as approver:
        assert (await approver.post("/api/sessions", json={"task": "x"})).status_code == 403
        who = (await approver.get("/api/whoami")).json()
        assert who == {"name": "april", "roles": ["approver"]}


async def test_bad_bodies(service: Service) -> None:
    async with service.client("sam") as client:
        big = await client.post("/api/sessions", json={"task": "x" * 70_000})
        assert big.status_code == 413
        # Chunked, without a Content-Length: counted as it arrives.

        async def chunks():  # type: ignore[no-untyped-def]
            for _ in range(100):
                yield b"x" * 1024

        chunked = await client.post(
            "/api/sessions", content=chunks(), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413
        cases = {
            b'{"task": ': "$",
            b"[]": "$",
            b'{"task": 1}': "$.task",
            b'{"task": "x", "skills": ["evil"]}': "$.skills",
            b'{"task": "x", "skills": ["greet", "greet"]}': "$.skills",
            b'{"task": "x", "skills": "greet"}': "$.skills",
            b'{"task": "x", "policy": "lax"}': "$.policy",
            b'{"task": "x", "policy_config": {"approve": []}}': "$.policy_config",
            b"{}": "$.task",
            b'{"task": ""}': "$.task",
            b'{"task": "x", "model": "scripted:/etc/passwd"}': "$.model",
        }
        for raw, field in cases.items():
            response = await client.post(
                "/api/sessions", content=raw, headers={"content-type": "application/json"}
            )
            assert response.status_code == 422, (raw, response.text)
            assert response.json()["field"] == field, (raw, response.json())
        form = await client.post("/api/sessions", data={"task": "x"})
        assert form.status_code == 415
        cross = await client.post(
            "/api/sessions", json={"task": "x"}, headers={"origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        bad_id = await client.get("/api/sessions/..%2F..%2Fetc%2Fpasswd")
        assert bad_id.status_code in (404, 422)
        assert (await client.get("/api/sessions/nosuchsession")).status_code == 404
        page = await client.get("/api/sessions/nosuchsession/events?limit=abc")
        assert page.status_code in (404, 422)
        # CORS is closed: no preflight answer, no CORS header anywhere.
        pre = await client.options(
            "/api/sessions", headers={"origin": "http://evil.example",
                                      "access-control-request-method": "POST"}
        )  # fmt: skip
        assert pre.status_code >= 400 and "access-control-allow-origin" not in pre.headers
    # Nothing was recorded by any of them.
    assert [i for i in await service.store.streams()] == []


async def test_approve_and_remember(service: Service) -> None:
    session = await submit(service)
    view = await wait_for(service, session, "awaiting_approval")
    [pending] = view["pending_approvals"]  # type: ignore[misc]
    assert (pending["path"], pending["args"]) == ("scripts/hi.py", ["<i>x</i>"])
    url = f"/api/sessions/{session}/approvals/{pending['call_id']}/approve"
    async with service.client("april") as client:
        for remember in ("forever", "pattern:Bash(scripts/other.py:*)", "pattern:Read Bash"):
            bad = await client.post(url, json={"remember": remember})
            assert bad.status_code == 422, bad.text
            assert bad.json()["field"] in ("remember", "$.remember"), bad.json()
        ok = await client.post(url, json={"remember": "pattern:Bash(scripts/hi.py:*)"})
        assert ok.status_code == 200, ok.text
    await wait_for(service, session, "ended")
    grants = [
        CODEC.decode(e) async for e in service.store.read(session)
        if e.type == "approval.remembered"
    ]  # fmt: skip
    assert [(g.scope, g.skill, g.pattern, g.decided_by) for g in grants] == [
        ("pattern", "greet", "Bash(scripts/hi.py:*)", "april")
    ]


async def test_submit_approve_and_continue(service: Service) -> None:
    session = await submit(service)
    view = await wait_for(service, session, "awaiting_approval")
    [pending] = view["pending_approvals"]  # type: ignore[misc]
    assert pending["tool"] == "skills.run_script" and pending["tier"] == "user"
    call = pending["call_id"]
    async with service.client("april") as client:
        ok = await client.post(
            f"/api/sessions/{session}/approvals/{call}/approve", json={"reason": "fine"}
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["decided_by"] == "april"
        again = await client.post(f"/api/sessions/{session}/approvals/{call}/deny", json={})
        assert again.status_code == 409 and "already approved" in again.json()["error"]
        never = await client.post(f"/api/sessions/{session}/approvals/call_9_9/approve", json={})
        assert never.status_code == 409
    view = await wait_for(service, session, "ended")
    assert view["ended_reason"] == "completed"
    decisions = [
        CODEC.decode(e) async for e in service.store.read(session) if e.type == "approval.resolved"
    ]
    assert decisions == [
        ApprovalResolved(call_id=call, approved=True, decided_by="april", reason="fine")
    ]
    async with service.client("victor") as client:
        verified = (await client.get(f"/api/sessions/{session}/verify")).json()
        assert verified["ok"] and verified["events"] == (await service.store.head(session)).seq + 1
        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert listed[0]["session"] == session and listed[0]["state"] == "ended"
        assert listed[0]["workers"]
        page = (await client.get(f"/api/sessions/{session}/events?from_seq=2&limit=3")).json()
        assert [e["seq"] for e in page["events"]] == [2, 3, 4] and page["next_seq"] == 5
        stored = [e async for e in service.store.read(session, from_seq=2, to_seq=5)]
        # The body is the stored bytes, verbatim, where it says so; the model's answer
        # echoes the scripted model's path, shown by its file's name (test_deploy.py).
        shown = [json.dumps(e["body"], separators=(",", ":"), sort_keys=True).encode()
                 for e in page["events"]]  # fmt: skip
        verbatim = [e["verbatim"] for e in page["events"]]
        assert verbatim == [b.find(b"turns.yaml") < 0 for b in shown]
        assert [b for b, v in zip(shown, verbatim, strict=True) if v] == [
            e.body for e, v in zip(stored, verbatim, strict=True) if v
        ]
        assert [e["hash"] for e in page["events"]] == [e.hash for e in stored]
    count, fault = await verify_stream(service.store, session)
    assert fault is None and count == verified["events"]
    async with service.client("victor") as client:
        proof = (await client.get(f"/api/sessions/{session}/replay")).json()
    prompts = [e.seq async for e in service.store.read(session) if e.type == "prompt.rendered"]
    assert proof["ok"] and proof["broken"] is None and proof["divergence"] is None
    assert [t["seq"] for t in proof["turns"]] == prompts and all(t["ok"] for t in proof["turns"])


async def test_double_approval_race(service: Service) -> None:
    session = await submit(service)
    view = await wait_for(service, session, "awaiting_approval")
    call = view["pending_approvals"][0]["call_id"]  # type: ignore[index]
    url = f"/api/sessions/{session}/approvals/{call}/"
    statuses: list[int] = []

    async def decide(who: str, verdict: str) -> None:
        async with service.client(who) as client:
            statuses.append((await client.post(url + verdict, json={})).status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(decide, "april", "approve")
        nursery.start_soon(decide, "alice", "deny")
    assert sorted(statuses) == [200, 409]
    decisions = [e async for e in service.store.read(session) if e.type == "approval.resolved"]
    assert len(decisions) == 1


async def test_openapi_and_health(service: Service) -> None:
    async with service.client("victor") as client:
        schema = (await client.get("/openapi.json")).json()
        assert schema["openapi"].startswith("3.")
        submit_op = schema["paths"]["/api/sessions"]["post"]
        ref = submit_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert body["required"] == ["task"] and body["additionalProperties"] is False
        assert body["properties"]["task"]["maxLength"] == 32_000
        assert {"model", "skills", "policy"} <= body["properties"].keys()
        assert submit_op["x-role"] == "submitter"
        assert (await client.get("/api/health")).json() == {"status": "ok"}
        assert (await client.get("/api/ready")).json() == {"status": "ready"}


async def test_a_tampered_log_is_reported_not_proven(service: Service) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    with sqlite3.connect(service.db) as db:  # an edit behind the log's back
        db.execute(
            "UPDATE events SET body = replace(body, 'greet me', 'greet you') "
            "WHERE stream = ? AND type = 'message.user'",
            (session,),
        )
    async with service.client("victor") as client:
        verified = (await client.get(f"/api/sessions/{session}/verify")).json()
        proof = (await client.get(f"/api/sessions/{session}/replay")).json()
    assert verified["ok"] is False and verified["fault"]["seq"] == 2
    assert proof["ok"] is False and "does not verify" in proof["broken"]


async def test_a_forged_but_chained_event_is_reported_with_its_rule(service: Service) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    head = await service.store.head(session)
    assert head is not None
    forged = ToolCompleted(call_id="ghost", tool="t", is_error=False, content="", duration_ms=0)
    # Appended through the store, so its hash links: only the session grammar can tell.
    await service.store.append(
        session, [CODEC.encode(forged, recorded_at=1)], expected_seq=head.seq + 1
    )
    async with service.client("victor") as client:
        verified = (await client.get(f"/api/sessions/{session}/verify")).json()
        proof = (await client.get(f"/api/sessions/{session}/replay")).json()
    async with service.client(None) as browser:
        await browser.post("/api/login", json={"token": service.tokens["victor"]})
        audit = (await browser.get(f"/console/sessions/{session}/audit")).text
    assert verified["ok"] is False
    assert verified["fault"] == {
        "kind": "grammar",
        "seq": head.seq + 1,
        "rule": "event_before_call",
        "detail": "tool.completed for call 'ghost', never called",
        "blob": None,
    }
    assert verified["faults"] == [verified["fault"]]
    assert proof["ok"] is False and "grammar event_before_call" in proof["broken"]
    assert "NOT PROVEN" in audit and 'class="check fail" data-check="grammar"' in audit
    assert "event_before_call" in audit


async def test_sessions_page_with_a_cursor_and_refuse_a_tampered_one(service: Service) -> None:
    ids = [await submit(service, task=f"task {i} 50%_off") for i in range(5)]
    async with service.client("victor") as client:
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/api/sessions", params=params)).json()
            seen += [s["session"] for s in page["sessions"]]
            cursor = page["next"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert {(s["submitter"], s["policy"]) for s in listed} == {("sam", "default")}
        found = (await client.get("/api/sessions", params={"q": "%_off"})).json()
        assert len(found["sessions"]) == 5
        assert (await client.get("/api/sessions", params={"q": "' OR 1=1 --"})).json() == {
            "sessions": [],
            "next": None,
        }
        for bad in ("nope", "WzEsMl0=", "WzE3OTU2MzA0MDkwMTE0MTk3MTUsIm90aGVyLWRiIl0="):
            refused = await client.get("/api/sessions", params={"cursor": bad})
            assert refused.status_code == 400, refused.text
            assert "cursor" in refused.json()["error"]
        wrong = await client.get("/api/sessions", params={"status": "bogus"})
        assert wrong.status_code == 422
