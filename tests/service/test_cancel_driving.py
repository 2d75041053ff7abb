"""Cancelling a session while this server's own worker is driving it, mid-turn: the
model streaming its answer, or a script running. The worker's turn is cut (what the
model had streamed is recorded as ``model.interrupted``), its lease handed back, then
the cancel is recorded: open calls resolved by effect class, ``session.ended``
(``cancelled``); the log verifies and nothing with an effect happens after it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import trio

from eventlog import closing
from orchestrator._events import (
    CODEC,
    ModelInterrupted,
    PromptRendered,
    ScriptStarted,
    SessionEnded,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
)
from orchestrator._session import Session

from .conftest import Service, running_service
from .test_api import submit, wait_for

STOP_WAIT_S = 10

# About 30 s of streaming (a piece of 16 characters every 400 ms): a cancel sent a
# second or so in lands mid-stream however loaded the machine is (a 2 s answer could
# end first, and the session then completed instead of being cut).
SLOW_TEXT = " ".join(["This answer streams slowly, sixteen characters at a time."] * 20)
SLOW_MODEL = f"""\
turns:
  - text: "{SLOW_TEXT}"
    stream_delay_ms: 400
"""


async def bodies(service: Service, session: str) -> list[Any]:
    async with closing(service.store.read(session)) as events:
        return [CODEC.decode(e) async for e in events]


def log_verifies(service: Service) -> None:
    """``skillog log verify`` over the whole database (chains, grammar, catalog)."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "log", "verify", "--db", str(service.db)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def wait_for_event(service: Service, session: str, kind: type) -> list[Any]:
    with trio.fail_after(30):
        while True:
            seen = await bodies(service, session)
            if any(isinstance(b, kind) for b in seen):
                return seen
            await trio.sleep(0.05)


async def test_cancel_while_the_model_streams(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=SLOW_MODEL) as service:
        session = await submit(service, task="cut me off")
        await wait_for_event(service, session, PromptRendered)
        with service.previews.following(session) as previews, trio.fail_after(30):
            await previews.receive()  # the worker is streaming: some text came in
        async with service.client("sam") as client:
            # Two cancels at once: one records it, the other finds it ended.
            answers: list[httpx.Response] = []

            async def cancel() -> None:
                url = f"/api/sessions/{session}/cancel"
                answers.append(await client.post(url, json={"reason": "stop"}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel)
                nursery.start_soon(cancel)
            done, other = sorted(answers, key=lambda r: r.status_code)
            assert done.status_code == 200, done.text
            assert other.status_code == 409 and "ended" in other.json()["error"], other.text
            view = (await client.get(f"/api/sessions/{session}")).json()
            assert view["status"] == "ended" and view["ended_reason"] == "cancelled"
            verdict = (await client.get(f"/api/sessions/{session}/verify")).json()
            assert verdict["ok"], verdict
        recorded = await bodies(service, session)
        names = [type(b).__name__ for b in recorded]
        cut = [b for b in recorded if isinstance(b, ModelInterrupted)]
        assert len(cut) == 1 and cut[0].text_size > 0, names
        assert isinstance(recorded[-1], SessionEnded) and recorded[-1].reason == "cancelled"
        assert names.index("ModelInterrupted") < names.index("SessionEnded")
        await trio.sleep(1.0)  # the worker does not claim it back or act after the end
        assert await bodies(service, session) == recorded
    log_verifies(service)
    redrives(service, session)


TOKEN = "cancel-marker-7f3a"
SLOW_SCRIPT = f"""\
turns:
  - text: "Loading the skill."
    tool_calls: [{{name: skills.load, arguments: {{names: [greet]}}}}]
  - text: "Running its script."
    tool_calls: [{{name: skills.run_script, arguments: {{path: scripts/hi.py, args: [{TOKEN}]}}}}]
  - text: "Done."
"""


def running_scripts() -> list[str]:
    """Processes whose command line carries the test's marker."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if TOKEN.encode() in cmdline and proc.name.isdigit():
            found.append(proc.name)
    return found


async def test_cancel_while_a_script_runs(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, turns=SLOW_SCRIPT) as service:
        script = tmp_path / "skills" / "greet" / "scripts" / "hi.py"
        script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
        session = await submit(service, task="run something slow")
        view = await wait_for(service, session, "awaiting_approval")
        call = view["pending_approvals"][0]["call_id"]  # type: ignore[index]
        async with service.client("april") as approver:
            url = f"/api/sessions/{session}/approvals/{call}/approve"
            assert (await approver.post(url, json={})).status_code == 200
        await wait_for_event(service, session, ScriptStarted)
        with trio.fail_after(30):
            while True:
                if running_scripts():
                    break
                await trio.sleep(0.05)
        async with service.client("sam") as client:
            with trio.fail_after(STOP_WAIT_S):
                done = await client.post(f"/api/sessions/{session}/cancel", json={})
            assert done.status_code == 200, done.text
            verdict = (await client.get(f"/api/sessions/{session}/verify")).json()
            assert verdict["ok"], verdict
        assert running_scripts() == []  # the script's process group was killed
        recorded = await bodies(service, session)
        names = [type(b).__name__ for b in recorded]
        # The open call is resolved by the effect class its intent recorded: a script
        # only allowed in the sandbox without network is pure (an error result, not
        # run again); one that may reach out is at-most-once (``tool.interrupted``).
        called = next(b for b in recorded if isinstance(b, ToolCalled) and b.call_id == call)
        *_, closed, ended = recorded
        assert closed.call_id == call and closed.tool == "skills.run_script", names
        if called.effect == "at-most-once":
            assert isinstance(closed, ToolInterrupted)
        else:
            assert isinstance(closed, ToolCompleted) and closed.error_type == "cancelled"
        assert isinstance(ended, SessionEnded) and ended.reason == "cancelled"
        await trio.sleep(1.0)
        assert await bodies(service, session) == recorded
    log_verifies(service)
    redrives(service, session)


MARKER_SCRIPT = """\
turns:
  - text: "Loading the skill and running its script."
    tool_calls:
      - {name: skills.load, arguments: {names: [greet]}}
      - {name: skills.run_script, arguments: {path: scripts/hi.py}}
  - text: "Done."
"""


@contextlib.contextmanager
def held_after_the_answer() -> Iterator[trio.Event]:
    """Hold every driver in this process right after it recorded a model answer that
    asks for tools, before the pipeline records any further intent (the answer's first
    call, a load, has its intent in the answer's transaction; the script call after it
    has none yet); the event is set once one is held there."""
    held = trio.Event()
    original = Session.run_tools

    async def hold(self: Session) -> list[str]:
        held.set()
        await trio.sleep_forever()
        return await original(self)  # pragma: no cover - cut by the cancel

    Session.run_tools = hold  # type: ignore[method-assign]
    try:
        yield held
    finally:
        Session.run_tools = original  # type: ignore[method-assign]


def redrives(service: Service, session: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "replay", session, "--redrive",
         "--db", str(service.db)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


async def test_cancel_between_the_answer_and_a_calls_intent(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    """The model asked for a load and a script; the cancel lands before the script
    call's intent: that call is closed as never started, the worker (cut) never starts
    it, the script's marker file is never written."""
    config, tokens = service_env
    marker = tmp_path / "script-ran"
    with held_after_the_answer() as held:
        async with running_service(tmp_path, config, tokens, turns=MARKER_SCRIPT) as service:
            script = tmp_path / "skills" / "greet" / "scripts" / "hi.py"
            script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
            session = await submit(service, task="load and run")
            with trio.fail_after(30):
                await held.wait()
            async with service.client("sam") as client:
                with trio.fail_after(STOP_WAIT_S):
                    url = f"/api/sessions/{session}/cancel"
                    done = await client.post(url, json={"reason": "changed my mind"})
                assert done.status_code == 200, done.text
                verdict = (await client.get(f"/api/sessions/{session}/verify")).json()
                assert verdict["ok"], verdict
                proof = await client.get(f"/api/sessions/{session}/replay")
                assert proof.status_code == 200 and proof.json()["ok"], proof.text
                page = await client.get(f"/console/sessions/{session}")  # its trace: below
                assert page.status_code == 200, page.text[:300]
                # The trace (what the page renders) and the audit report show the call
                # that never started.
                for path in (
                    f"/api/sessions/{session}/trace",
                    f"/console/sessions/{session}/audit",
                ):
                    page = await client.get(path)
                    assert page.status_code == 200, (path, page.text[:300])
                    assert "never ran" in page.text, path
            recorded = await bodies(service, session)
            names = [type(b).__name__ for b in recorded]
            calls = [b for b in recorded if isinstance(b, ToolCalled)]
            assert [c.tool for c in calls] == ["skills.load"], names
            assert not any(isinstance(b, ScriptStarted) for b in recorded), names
            *_, load, script_call, ended = recorded
            assert isinstance(load, ToolCompleted) and load.tool == "skills.load", names
            assert isinstance(script_call, ToolCompleted), names
            assert script_call.tool == "skills.run_script"
            assert script_call.error_type == "cancelled" and script_call.is_error
            assert "never ran" in script_call.content
            assert isinstance(ended, SessionEnded) and ended.reason == "cancelled"
            await trio.sleep(1.0)  # the worker does not claim it back or act after the end
            assert await bodies(service, session) == recorded
    assert not marker.exists()  # (sandboxed, it could not have: see tests/orchestrator/test_cancel)
    log_verifies(service)
    redrives(service, session)
