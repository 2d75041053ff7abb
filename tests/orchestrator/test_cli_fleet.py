"""The fleet as a user runs it: `skillog submit`, two `skillog worker` processes,
`skillog sessions` showing who ran what, and a graceful SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, LeaseReleased
from orchestrator._fleet import lease_stream

CLI = [sys.executable, "-m", "orchestrator.cli"]


def skillog(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def scripted(tmp_path: Path, text: str = "done") -> Path:
    script = tmp_path / "turns.yaml"
    script.write_text(f"turns:\n  - text: {text}\n")
    return script


def test_submit_then_two_workers_then_sessions(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    script = scripted(tmp_path)
    ids = []
    for i in range(4):
        out = skillog(
            "submit", f"task {i}", "--model", f"scripted:{script}", "--db", db, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr
        ids.append(out.stdout.strip())
    workers = [
        subprocess.Popen(
            [*CLI, "worker", "--db", str(db), "--once", "--poll-ms", "50", "--name", name],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    outputs = [w.communicate(timeout=120) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    listing = skillog("sessions", "--db", db, cwd=tmp_path)
    for session_id in ids:
        line = next(x for x in listing.stdout.splitlines() if x.startswith(session_id))
        assert "ended (completed)" in line and (" by alpha" in line or " by beta" in line)
    assert skillog("log", "verify", "--db", db, cwd=tmp_path).returncode == 0


def test_sigterm_hands_in_flight_sessions_back(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "slow"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: slow\ndescription: Slow.\n---\nWait.\n")
    (skill / "scripts" / "wait.py").write_text("import time\ntime.sleep(60)\n")
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [slow]}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {path: scripts/wait.py}}]\n"
        "  - text: done\n"
    )
    db = tmp_path / "fleet.db"
    sid = skillog(
        "submit", "wait", "--model", f"scripted:{script}", "--skills", skill, "--tier", "org",
        "--db", db, cwd=tmp_path,
    ).stdout.strip()  # fmt: skip
    worker = subprocess.Popen(
        [*CLI, "worker", "--db", str(db), "--skills", str(skill), "--tier", "org",
         "--drain-s", "0.5", "--poll-ms", "50"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    async def started() -> bool:
        async with open_sqlite_store(db, readonly=True) as store:
            return any([e.type == "script.started" async for e in store.read(sid)])

    deadline = time.monotonic() + 60
    while not trio.run(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(worker.pid, signal.SIGTERM)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "SIGTERM: no new claims" in err and f"{sid} handed back" in out

    async def released() -> list[LeaseReleased]:
        async with open_sqlite_store(db, readonly=True) as store:
            return [
                b
                async for e in store.read(lease_stream(sid))
                if isinstance(b := CODEC.decode(e), LeaseReleased)
            ]

    assert [r.outcome for r in trio.run(released)] == ["queued", "handed back"]
