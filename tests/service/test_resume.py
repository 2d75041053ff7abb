"""Resuming through the API: a session whose approvals were decided goes on under this
server's worker (``resume`` answers 202 even when the worker took it up already), and
a session that failed on a model error goes on in a new session forked just before
the failing call (its own log stays ended: nothing follows ``session.ended``), which
the workers drive to its end once the model answers again."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2 as httpx
import trio

from eventlog import closing
from orchestrator._events import CODEC, ModelFailed, PromptRendered, SessionEnded, SessionForked
from orchestrator._fleet import holder
from orchestrator._streams import is_session_stream

from .conftest import Service, running_service
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
            # Asked again: the same session, not a second one.
            again = await client.post(f"/api/sessions/{session}/resume", json={})
            assert again.status_code == 200, again.text
            assert again.json()["continued_in"] == went_on
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


async def _continuations(service: Service, parent: str) -> list[str]:
    """The sessions whose log says they were forked from ``parent``."""
    found = []
    for info in await service.store.streams():
        if not is_session_stream(info.stream):
            continue
        async with closing(service.store.read(info.stream, to_seq=1)) as events:
            async for event in events:
                first = CODEC.decode(event)
                if isinstance(first, SessionForked) and first.from_session == parent:
                    found.append(info.stream)
    return found


async def test_resume_of_a_failed_session_twice_and_at_once_goes_on_in_one_session(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    """Two resumes at once (a double click) and a third later: one new session, and
    every answer names it (202 for the request that made it, 200 for the others)."""
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=FAILING) as service:
        session = await submit(service, task="fail, then go on once")
        await wait_for(service, session, "ended")
        async with service.client("sam") as client:
            url = f"/api/sessions/{session}/resume"
            answers: list[httpx.Response] = []

            async def resume() -> None:
                answers.append(await client.post(url, json={}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(resume)
                nursery.start_soon(resume)
            answers.append(await client.post(url, json={}))
            codes = sorted(a.status_code for a in answers)
            assert codes == [200, 200, 202], [a.text for a in answers]
            went_on = {a.json()["continued_in"] for a in answers}
            assert len(went_on) == 1 and None not in went_on, went_on
            assert await _continuations(service, session) == list(went_on)
    log_verifies(service)
