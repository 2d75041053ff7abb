"""One driver per session: `skillog run`/`resume`, `skillog worker`, `serve`'s workers
and `mcp serve` each take the session's lease before acting and refuse a live one held
by another, naming the holder and when it expires (issue 23, item 3). Real processes
drive a sandboxed script; the second driver comes while it runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gated
import pytest
import trio

from eventlog import open_sqlite_store, verify
from orchestrator._events import CODEC, LeaseAcquired, LeaseReleased, SessionEnded
from orchestrator._fleet import (
    LeaseHeldError,
    Worker,
    acquire,
    lease_history,
    lease_stream,
    queue_session,
)
from orchestrator._grammar import session_grammar
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel

CLI = [sys.executable, "-m", "orchestrator.cli"]
RELEASE_AFTER_S = 4
"""How long test_resume_refuses_a_workers_session_then_waits_for_it lets the script run
after its waiting resume started, so that the resume finds the lease still held."""


def skillog(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120,
        stdin=subprocess.DEVNULL, env={**os.environ, "HOME": str(cwd),
                                       "SKILLOG_CONFIG": str(cwd / "config.yaml")},
    )  # fmt: skip


def spawn(*args: str | Path, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *map(str, args)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, stdin=subprocess.DEVNULL, env={**os.environ, "HOME": str(cwd),
                                                  "SKILLOG_CONFIG": str(cwd / "config.yaml")},
    )  # fmt: skip


@pytest.fixture
def slow(tmp_path: Path) -> tuple[Path, Path]:
    """A skill whose script runs until the test releases it (:func:`release`; at most
    60 s), and a model script using it. A fixed sleep raced the test's own processes on
    a loaded machine: the script ended before the second process could be refused."""
    skill = tmp_path / "skills" / "slow"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: slow\ndescription: Slow.\n---\nWait.\n")
    (skill / "scripts" / "wait.py").write_text(gated.GATED_SCRIPT)
    turns = tmp_path / "turns.yaml"
    turns.write_text(
        "turns:\n"
        "  - tool_calls: [{id: c1, name: skills.load, arguments: {names: [slow]}}]\n"
        "  - tool_calls: [{id: c2, name: skills.run_script, arguments: {path: scripts/wait.py}}]\n"
        "  - text: done\n"
    )
    return skill, turns


def release(driver: subprocess.Popen[str]) -> None:
    """Let the slow script ``driver`` runs finish (it exits 0 on SIGUSR1)."""
    released = gated.release(driver.pid, "wait.py")
    assert released == 1, f"{released} running wait.py scripts under {driver.pid}"


def types(db: Path, stream: str) -> list[str]:
    async def read() -> list[str]:
        async with open_sqlite_store(db, readonly=True) as store:
            return [e.type async for e in store.read(stream)]

    try:
        return trio.run(read)
    except Exception:  # the database is not there yet
        return []


def wait_for_script(db: Path, session: str) -> None:
    deadline = time.monotonic() + 60
    while "script.started" not in types(db, session):
        assert time.monotonic() < deadline, "the script never started"
        time.sleep(0.05)


def first_session(db: Path) -> str:
    async def read() -> list[str]:
        async with open_sqlite_store(db, readonly=True) as store:
            # Not the index run a starting session records just before its own stream.
            streams = await store.streams()
            return [i.stream for i in streams if "/" not in i.stream and i.stream != "skills-index"]

    deadline = time.monotonic() + 60
    while True:
        try:
            found = trio.run(read)
        except Exception:  # the database is not there yet
            found = []
        if found:
            return found[0]
        assert time.monotonic() < deadline, "no session started"
        time.sleep(0.05)


def assert_ran_once(db: Path, session: str) -> None:
    """One script.started and one outcome; no tool.interrupted; the log verifies."""
    recorded = types(db, session)
    assert recorded.count("script.started") == 1, recorded
    assert recorded.count("script.executed") == 1, recorded
    assert "tool.interrupted" not in recorded
    assert recorded[-1] == "session.ended"

    async def check() -> None:
        async with open_sqlite_store(db, readonly=True) as store:
            assert (await verify(store, grammar=session_grammar)).ok

    trio.run(check)


def refused(out: subprocess.CompletedProcess[str], holder: str) -> None:
    assert out.returncode == 2, out
    assert re.search(rf"is being driven by {holder}\S* \(its lease runs until \d{{4}}-", out.stderr)
    assert "--wait" in out.stderr and "Traceback" not in out.stderr


def submit(tmp_path: Path, db: Path, turns: Path, skill: Path) -> str:
    out = skillog(
        "submit", "wait", "--model", f"scripted:{turns}", "--skills", skill, "--tier", "org",
        "--db", db, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_resume_refuses_a_workers_session_then_waits_for_it(
    tmp_path: Path, slow: tuple[Path, Path]
) -> None:
    skill, turns = slow
    db = tmp_path / "fleet.db"
    sid = submit(tmp_path, db, turns, skill)
    worker = spawn(
        "worker", "--db", db, "--skills", skill, "--tier", "org", "--once", "--poll-ms", "50",
        "--name", "alpha", "--lease-ms", "3000", cwd=tmp_path,
    )  # fmt: skip
    wait_for_script(db, sid)
    refused(skillog("resume", sid, "--db", db, "--approve", cwd=tmp_path), "alpha")
    waiting = spawn("resume", sid, "--wait", "--db", db, "--skills", skill, cwd=tmp_path)
    time.sleep(RELEASE_AFTER_S)
    release(worker)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert "done" in out
    worker.communicate(timeout=60)
    assert worker.returncode == 0
    assert_ran_once(db, sid)


def test_a_worker_and_a_second_resume_leave_a_resumed_session_alone(
    tmp_path: Path, slow: tuple[Path, Path]
) -> None:
    skill, turns = slow
    db = tmp_path / "fleet.db"
    sid = submit(tmp_path, db, turns, skill)
    driver = spawn("resume", sid, "--db", db, "--skills", skill, "--tier", "org", cwd=tmp_path)
    wait_for_script(db, sid)
    worker = skillog("worker", "--db", db, "--skills", skill, "--tier", "org", "--once",
                     "--name", "beta", cwd=tmp_path)  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    assert "nothing to do" in worker.stdout
    refused(skillog("resume", sid, "--db", db, cwd=tmp_path), "resume:")
    release(driver)
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 0, err
    assert_ran_once(db, sid)


def test_resume_refuses_a_session_skillog_run_is_driving(
    tmp_path: Path, slow: tuple[Path, Path]
) -> None:
    skill, turns = slow
    db = tmp_path / "run.db"
    run = spawn("run", "wait", "--model", f"scripted:{turns}", "--skills", skill, "--tier", "org",
                "--db", db, cwd=tmp_path)  # fmt: skip
    sid = first_session(db)
    wait_for_script(db, sid)
    refused(skillog("resume", sid, "--db", db, cwd=tmp_path), "run:")
    worker = skillog("worker", "--db", db, "--once", cwd=tmp_path)
    assert "nothing to do" in worker.stdout  # never the fleet's: it was not submitted
    release(run)
    run.communicate(timeout=60)
    assert run.returncode == 0
    assert_ran_once(db, sid)


def test_resume_refuses_a_session_serves_worker_is_driving(
    tmp_path: Path, slow: tuple[Path, Path]
) -> None:
    skill, turns = slow
    db = tmp_path / "serve.db"
    sid = submit(tmp_path, db, turns, skill)
    err = tmp_path / "serve.err"
    with err.open("w") as sink:
        serve = subprocess.Popen(
            [*CLI, "serve", "--db", str(db), "--bind", "127.0.0.1:0", "--skills", str(skill),
             "--tier", "org", "--poll-ms", "50"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=sink, text=True,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(tmp_path),
                 "SKILLOG_CONFIG": str(tmp_path / "config.yaml")},
        )  # fmt: skip
    try:
        wait_for_script(db, sid)
        refused(skillog("resume", sid, "--db", db, cwd=tmp_path), "")
        release(serve)
        deadline = time.monotonic() + 60
        while "session.ended" not in types(db, sid):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=60)
    assert_ran_once(db, sid)


async def test_an_mcp_connection_holds_its_session(tmp_path: Path) -> None:
    """An `mcp serve` connection's session is leased for as long as the connection
    lives: resume names the holder; a worker never claims it; closing releases it."""
    pytest.importorskip("mcp")
    from orchestrator.mcp_server._session import ServeConfig, ServedSession

    db = tmp_path / "mcp.db"
    async with open_sqlite_store(db) as store, trio.open_nursery() as nursery:
        served = ServedSession("client", ServeConfig(skills=()))
        await served.start(store, nursery)
        with pytest.raises(LeaseHeldError, match=r"driven by mcp:"):
            await acquire(store, served.id, "other", ttl_ns=10**9)
        out = await trio.to_thread.run_sync(
            lambda: skillog("resume", served.id, "--db", db, cwd=tmp_path)
        )
        refused(out, "mcp:")
        worker = Worker(store, lambda started: Agent(model=ScriptedModel([]), model_name="m"))
        await worker.run(trio.Event(), once=True)
        assert worker.finished == []
        await served.close()
        leases = [CODEC.decode(e) async for e in store.read(lease_stream(served.id))]
        assert isinstance(leases[0], LeaseAcquired)
        assert isinstance(leases[-1], LeaseReleased) and leases[-1].outcome == "ended"
        assert (await verify(store, grammar=session_grammar)).ok


async def test_only_an_expired_lease_is_taken_over(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "log.db") as store:
        agent = Agent(model=ScriptedModel([{"text": "done"}]), model_name="m")
        sid = await queue_session(store, agent, "task")
        now = time.time_ns()
        await acquire(store, sid, "dead", ttl_ns=10**9, clock=lambda: now)
        with pytest.raises(LeaseHeldError, match=r"driven by dead .* 0s from now"):
            await acquire(store, sid, "next", ttl_ns=10**9, clock=lambda: now + 10)
        later = now + 2 * 10**9
        taken = await acquire(store, sid, "next", ttl_ns=10**9, clock=lambda: later)
        assert taken.worker == "next"
        assert await lease_history(store, sid) == ["dead", "next"]
        bodies = [CODEC.decode(e) async for e in store.read(sid)]
        assert not [b for b in bodies if isinstance(b, SessionEnded)]
