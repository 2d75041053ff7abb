"""Faults with real processes: ``skillog serve`` SIGKILLed while a client follows a
session, restarted, the client reconnecting with Last-Event-ID; ``serve --workers 0``
on PostgreSQL as a pure front end for a separate ``skillog worker``; and, on SQLite
and on PostgreSQL, ``skillog worker`` processes SIGKILLed in the middle of a script's
run, or while an approval is pending, with a client following over SSE."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from eventlog import open_store
from orchestrator.service import new_token
from orchestrator.skills._config import add_service_token

from .conftest import TURNS, write_skill
from .test_cli_serve import start, stop


def setup(tmp_path: Path) -> tuple[dict[str, str], str, list[str]]:
    config = tmp_path / "config.yaml"
    token, entry = new_token("ops", ("admin",))
    add_service_token(str(config), entry)
    skill = write_skill(tmp_path)
    (tmp_path / "turns.yaml").write_text(TURNS)
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path / "home")}
    args = ["--model", f"scripted:{tmp_path / 'turns.yaml'}", "--skills", str(skill),
            "--poll-ms", "100"]  # fmt: skip
    return env, token, args


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=url, headers={"authorization": f"Bearer {token}"}, trust_env=False, timeout=30
    )


def wait_for(c: httpx.Client, session: str, status: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        view: dict[str, object] = c.get(f"/api/sessions/{session}").json()
        if view["status"] == status:
            return view
        time.sleep(0.1)
    raise AssertionError(f"session {session} never reached {status}: {view}")


def events(c: httpx.Client, session: str, last: int | None, until: str) -> Iterator[dict]:  # type: ignore[type-arg]
    headers = {} if last is None else {"last-event-id": str(last)}
    with c.stream("GET", f"/api/sessions/{session}/stream", headers=headers) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                yield event
                if event["type"] == until:
                    return


def log_of(db: str, session: str) -> list[tuple[int, str]]:
    import trio

    async def read() -> list[tuple[int, str]]:
        async with open_store(db, readonly=True) as store:
            return [(e.seq, e.hash) async for e in store.read(session)]

    return trio.run(read)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The log: a SQLite file, or a fresh database on the throwaway PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


def test_server_killed_and_restarted_followers_miss_nothing(tmp_path: Path, db: str) -> None:
    env, token, args = setup(tmp_path)
    args = [*args, "--db", db]
    proc, url = start(tmp_path, env, *args)
    got: list[dict] = []  # type: ignore[type-arg]
    try:
        with client(url, token) as c:
            session = c.post("/api/sessions", json={"task": "greet"}).json()["session_id"]
            got.extend(events(c, session, None, "session.suspended"))
    finally:
        proc.send_signal(signal.SIGKILL)  # no shutdown, no release: as a crash
        proc.communicate(timeout=30)  # and close its pipe
    proc, url = start(tmp_path, env, *args)  # the same log, a new process
    try:
        with client(url, token) as c:
            view = wait_for(c, session, "awaiting_approval")
            [pending] = view["pending_approvals"]  # type: ignore[misc]  # not lost
            call = pending["call_id"]
            assert c.post(f"/api/sessions/{session}/approvals/{call}/approve", json={}).is_success
            got.extend(events(c, session, got[-1]["seq"], "session.ended"))
    finally:
        stop(proc)
    assert [(e["seq"], e["hash"]) for e in got] == log_of(db, session)


def test_front_end_on_postgres_with_a_separate_worker(tmp_path: Path, pg_dsn: str) -> None:
    env, token, args = setup(tmp_path)
    proc, url = start(tmp_path, env, *args, "--workers", "0", "--db", pg_dsn)
    skills = args[args.index("--skills") + 1]
    worker = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "worker", "--db", pg_dsn, "--skills",
         skills, "--poll-ms", "100", "--name", "outside"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with client(url, token) as c:
            session = c.post("/api/sessions", json={"task": "greet"}).json()["session_id"]
            view = wait_for(c, session, "awaiting_approval")
            assert view["workers"] == ["outside"]  # the front end drives nothing itself
            call = view["pending_approvals"][0]["call_id"]  # type: ignore[index]
            decided = c.post(f"/api/sessions/{session}/approvals/{call}/approve", json={})
            assert decided.json()["decided_by"] == "ops"
            streamed = list(events(c, session, None, "session.ended"))
            assert wait_for(c, session, "ended")["ended_reason"] == "completed"
            assert c.get(f"/api/sessions/{session}/verify").json()["ok"] is True
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        stop(proc)
    assert [(e["seq"], e["hash"]) for e in streamed] == log_of(pg_dsn, session)


def spawn_worker(
    tmp_path: Path, env: dict[str, str], db: str, name: str, *args: str
) -> subprocess.Popen[bytes]:
    """A ``skillog worker`` process with a 1 s lease (a dead one is taken over soon)."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "worker", "--db", db, "--poll-ms", "100",
         "--lease-ms", "1000", "--name", name, *args],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def end_all(workers: list[subprocess.Popen[bytes]]) -> None:
    for p in workers:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)


def test_worker_killed_mid_session_followers_see_the_resumption(tmp_path: Path, db: str) -> None:
    env, token, _ = setup(tmp_path)
    skill = tmp_path / "slow"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: slow\ndescription: Slow.\n---\nWait.\n")
    (skill / "scripts" / "wait.py").write_text("import time\ntime.sleep(3)\nprint('waited')\n")
    (tmp_path / "slow.yaml").write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [slow]}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {path: scripts/wait.py}}]\n"
        "  - text: done\n"
    )
    skills = ("--skills", str(skill), "--tier", "org")
    proc, url = start(
        tmp_path, env, "--db", db, "--workers", "0", "--model",
        f"scripted:{tmp_path / 'slow.yaml'}", *skills,
    )  # fmt: skip
    workers = [spawn_worker(tmp_path, env, db, "first", *skills)]
    got: list[dict] = []  # type: ignore[type-arg]
    try:
        with client(url, token) as c:
            session = c.post("/api/sessions", json={"task": "wait"}).json()["session_id"]
            for event in events(c, session, None, "session.ended"):  # one live connection
                got.append(event)
                if event["type"] == "script.started" and len(workers) == 1:
                    workers[0].send_signal(signal.SIGKILL)  # inside the script's run
                    workers[0].wait(timeout=30)
                    workers.append(spawn_worker(tmp_path, env, db, "second", *skills))
            view = wait_for(c, session, "ended")
    finally:
        end_all(workers)
        stop(proc)
    assert view["ended_reason"] == "completed" and view["workers"] == ["first", "second"]
    assert [(e["seq"], e["hash"]) for e in got] == log_of(db, session)
    # Each call has one outcome, whoever finished it.
    types = [e["type"] for e in got]
    assert types.count("tool.called") == types.count("tool.completed") == 2
    assert types.count("script.executed") == 1


def test_worker_killed_with_an_approval_pending_loses_nothing(tmp_path: Path, db: str) -> None:
    env, token, args = setup(tmp_path)
    skills = ("--skills", args[args.index("--skills") + 1])  # tier user: the script asks
    proc, url = start(tmp_path, env, *args, "--db", db, "--workers", "0")
    workers = [spawn_worker(tmp_path, env, db, "first", *skills)]
    got: list[dict] = []  # type: ignore[type-arg]
    try:
        with client(url, token) as c:
            session = c.post("/api/sessions", json={"task": "greet"}).json()["session_id"]
            for event in events(c, session, None, "approval.requested"):
                got.append(event)
            workers[0].send_signal(signal.SIGKILL)  # the approval is pending
            workers[0].wait(timeout=30)
            [pending] = c.get("/api/approvals", params={"session": session}).json()["approvals"]
            assert pending["call_id"] == got[-1]["body"]["call_id"]  # still pending
            decided = c.post(
                f"/api/sessions/{session}/approvals/{pending['call_id']}/approve", json={}
            )
            assert decided.status_code == 200 and decided.json()["decided_by"] == "ops"
            workers.append(spawn_worker(tmp_path, env, db, "second", *skills))
            got.extend(events(c, session, got[-1]["seq"], "session.ended"))
            view = wait_for(c, session, "ended")
    finally:
        end_all(workers)
        stop(proc)
    assert view["ended_reason"] == "completed" and view["workers"][-1] == "second"
    assert [(e["seq"], e["hash"]) for e in got] == log_of(db, session)
    types = [e["type"] for e in got]
    assert types.count("approval.resolved") == 1 and types.count("script.executed") == 1
