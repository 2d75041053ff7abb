"""Acting on sessions through the API: cancel (recorded, open calls resolved by effect
class, the log still verifies), fork from an event (a new session the workers
continue), resume, and one decision for many approvals; each with its refusals."""

from __future__ import annotations

from typing import Any

from eventlog import closing
from orchestrator._events import CODEC, ApprovalResolved, SessionEnded, ToolCompleted
from orchestrator._fleet import leased

from .conftest import Service
from .test_api import submit, wait_for
from .test_cancel_driving import redrives


async def bodies(service: Service, session: str) -> list[Any]:
    async with closing(service.store.read(session)) as events:
        return [CODEC.decode(e) async for e in events]


async def test_cancel_a_suspended_session(service: Service) -> None:
    session = await submit(service, task="cancel me")
    await wait_for(service, session, "awaiting_approval")
    async with service.client("victor") as viewer:
        refused = await viewer.post(f"/api/sessions/{session}/cancel", json={})
        assert refused.status_code == 403
    async with service.client("sam") as client:
        done = await client.post(f"/api/sessions/{session}/cancel", json={"reason": "wrong task"})
        assert done.status_code == 200, done.text
        assert done.json() == {
            "session_id": session,
            "reason": "cancelled by sam: wrong task",
            "cancelled_by": "sam",
        }
        view = (await client.get(f"/api/sessions/{session}")).json()
        assert view["status"] == "ended" and view["ended_reason"] == "cancelled"
        assert view["pending_approvals"] == []
        # The pending script was denied by the canceller and closed with an error; the
        # session's log still passes every check.
        *_, denied, closed, ended = await bodies(service, session)
        assert isinstance(denied, ApprovalResolved) and not denied.approved
        assert denied.decided_by == "sam"
        assert isinstance(closed, ToolCompleted) and closed.is_error
        assert closed.error_type == "cancelled"
        assert isinstance(ended, SessionEnded) and ended.reason == "cancelled"
        verdict = (await client.get(f"/api/sessions/{session}/verify")).json()
        assert verdict["ok"], verdict
        again = await client.post(f"/api/sessions/{session}/cancel", json={})
        assert again.status_code == 409 and "already ended" in again.json()["error"]
        missing = await client.post("/api/sessions/nope/cancel", json={})
        # A session another process drives (a live lease not this server's): refused.
        other = await submit(service, task="driven elsewhere")
        await wait_for(service, other, "awaiting_approval")
        # The worker records the suspension, then hands its lease back: wait for that.
        async with leased(service.store, other, "run:elsewhere:1:abc", wait=True):
            held = await client.post(f"/api/sessions/{other}/cancel", json={})
        assert held.status_code == 409 and "run:elsewhere:1:abc" in held.json()["error"]
        assert "stop that driver" in held.json()["error"]
        assert missing.status_code == 404
        resumed = await client.post(f"/api/sessions/{session}/resume", json={})
        assert resumed.status_code == 409 and "fork it" in resumed.json()["error"]
    redrives(service, session)  # the cancel's events are copied, not re-driven


async def test_fork_from_an_event_runs_on(service: Service) -> None:
    session = await submit(service, task="fork me")
    await wait_for(service, session, "awaiting_approval")
    async with service.client("alice") as client:
        events = (await client.get(f"/api/sessions/{session}/events")).json()["events"]
        # Fork right after the first model answer: the new session goes on from there.
        at = next(e["seq"] for e in events if e["type"].startswith("model.responded"))
        made = await client.post(f"/api/sessions/{session}/fork", json={"at_seq": at})
        assert made.status_code == 201, made.text
        fork = made.json()
        assert fork["forked_from"] == session and fork["at_seq"] == at
        view = await wait_for(service, fork["session_id"], "awaiting_approval")
        assert view["pending_approvals"]
        copied = await bodies(service, fork["session_id"])
        assert type(copied[0]).__name__ == "SessionForked"
        verdict = (await client.get(f"/api/sessions/{fork['session_id']}/verify")).json()
        assert verdict["ok"], verdict
        listed = (await client.get("/api/sessions", params={"q": "fork me"})).json()
        assert {r["session"] for r in listed["sessions"]} == {session, fork["session_id"]}
        too_far = await client.post(f"/api/sessions/{session}/fork", json={"at_seq": 10_000})
        assert too_far.status_code == 422 and too_far.json()["field"] == "$.at_seq"
        negative = await client.post(f"/api/sessions/{session}/fork", json={"at_seq": -1})
        assert negative.status_code == 422


async def test_bulk_decision_and_resume(service: Service) -> None:
    first, second = await submit(service, task="one"), await submit(service, task="two")
    for session in (first, second):
        await wait_for(service, session, "awaiting_approval")
    async with service.client("april") as client:
        pending = (await client.get("/api/approvals")).json()["approvals"]
        items = [{"session": p["session_id"], "call": p["call_id"]} for p in pending]
        resumed = await client.post(f"/api/sessions/{first}/resume", json={})
        assert resumed.status_code == 403  # an approver does not drive sessions
        made = await client.post(
            "/api/approvals/decide",
            json={"approve": True, "reason": "batch ok", "requests": [*items, items[0]]},
        )
        assert made.status_code == 200, made.text
        out = made.json()
        assert out["decided"] == 2
        assert [o["decision"]["decided_by"] for o in out["outcomes"][:2]] == ["april"] * 2
        assert out["outcomes"][2]["decision"] is None
        assert "already approved by april" in out["outcomes"][2]["error"]
        empty = await client.post("/api/approvals/decide", json={"approve": True, "requests": []})
        assert empty.status_code == 422
    for session in (first, second):
        await wait_for(service, session, "ended")
    async with service.client("sam") as client:
        waiting = await submit(service, task="three")
        await wait_for(service, waiting, "awaiting_approval")
        early = await client.post(f"/api/sessions/{waiting}/resume", json={})
        assert early.status_code == 409 and "awaits 1 decision" in early.json()["error"]
