"""Resuming through the API: a session whose approvals were decided goes on under this
server's worker (``resume`` answers 202 even when the worker took it up already), and
a session that failed on a model error goes on in a new session forked just before
the failing call (its own log stays ended: nothing follows ``session.ended``), which
the workers drive to its end once the model answers again."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from orchestrator._events import ModelFailed, PromptRendered, SessionEnded, SessionForked
from orchestrator._fleet import holder

from .conftest import running_service
from .test_actions import bodies
from .test_api import submit, wait_for
from .test_cancel_driving import log_verifies

FAILING = """\
turns:
  - error: {kind: http, status: 401, message: "the key was revoked", retryable: false}
"""
SLOW_END = """\
turns:
  - text: "Loading the skill."
    tool_calls: [{name: skills.load, arguments: {names: [greet]}}]
  - text: "Running its script."
    tool_calls: [{name: skills.run_script, arguments: {path: scripts/hi.py, args: []}}]
  - text: "Done, and said so slowly enough to be seen going on."
    stream_delay_ms: 300
"""
ANSWERING = """\
turns:
  - text: "Back again, all done."
"""


async def test_resume_after_a_decision(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=SLOW_END) as service:
        session = await submit(service, task="approve then resume")
        view = await wait_for(service, session, "awaiting_approval")
        call = view["pending_approvals"][0]["call_id"]  # type: ignore[index]
        async with service.client("alice") as client:
            url = f"/api/sessions/{session}/approvals/{call}/approve"
            assert (await client.post(url, json={})).status_code == 200
            resumed = await client.post(f"/api/sessions/{session}/resume", json={})
            assert resumed.status_code == 202, resumed.text
            assert resumed.json()["queued"] is True
            # Asked again while this server's worker drives it: the same answer, not
            # a refusal (it is going on, as asked).
            with trio.fail_after(30):
                while True:
                    if await holder(service.store, session, time.time_ns()) is not None:
                        break
                    await trio.sleep(0.02)
            again = await client.post(f"/api/sessions/{session}/resume", json={})
            assert again.status_code == 202, again.text
        view = await wait_for(service, session, "ended")
        assert view["ended_reason"] == "completed"
    log_verifies(service)


async def test_resume_after_a_model_error(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=FAILING) as service:
        session = await submit(service, task="fail, then go on")
        view = await wait_for(service, session, "ended")
        assert view["ended_reason"] == "error"
        (tmp_path / "turns.yaml").write_text(ANSWERING)  # the provider answers again
        async with service.client("victor") as viewer:
            refused = await viewer.post(f"/api/sessions/{session}/resume", json={})
            assert refused.status_code == 403
        async with service.client("sam") as client:
            resumed = await client.post(f"/api/sessions/{session}/resume", json={})
            assert resumed.status_code == 202, resumed.text
            out = resumed.json()
            assert out["session_id"] == session and out["queued"] is True
            went_on = out["continued_in"]
            assert went_on and went_on != session
            view = await wait_for(service, went_on, "ended")
            assert view["ended_reason"] == "completed"
            recorded = await bodies(service, went_on)
            link = recorded[0]
            assert isinstance(link, SessionForked) and link.from_session == session
            # Forked before the failing turn's prompt: neither it nor its failure is
            # copied; the prompt is rendered again and answered.
            assert not any(isinstance(b, ModelFailed) for b in recorded), recorded
            assert (
                link.at_seq
                == next(
                    i
                    for i, b in enumerate(await bodies(service, session))
                    if isinstance(b, PromptRendered)
                )
                - 1
            )
            assert isinstance(recorded[-1], SessionEnded)
            assert recorded[-1].reason == "completed"
            verdict = (await client.get(f"/api/sessions/{went_on}/verify")).json()
            assert verdict["ok"], verdict
            # A session that ended otherwise (completed here) is still forked by hand.
            again = await client.post(f"/api/sessions/{went_on}/resume", json={})
            assert again.status_code == 409 and "fork it" in again.json()["error"]
    log_verifies(service)
