"""The hostile script corpus (issue 13), run in real bubblewrap with small limits.

Each case checks the outcome, the recorded event where it matters, and that the machine
(no process or cgroup left behind) and the session keep working afterwards. The table
of results is in docs/security.md.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from orchestrator._effects import ApprovalDecision, ApprovalRequest
from orchestrator._events import PolicyConfig, PolicyDenied, ScriptExecuted, ToolCompleted
from orchestrator.scripts import _cgroup
from orchestrator.scripts._limits import ScriptLimits
from orchestrator.scripts._run import ScriptRequest, ScriptResult, run_script
from orchestrator.scripts._sandbox import probe_sandbox, sandbox_available
from orchestrator.skills import Tier

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")

SMALL = ScriptLimits(
    cpu_s=1,
    memory_bytes=128 << 20,
    pids=32,
    file_bytes=8 << 20,
    open_files=64,
    stored_output_bytes=256 << 10,
)
CGROUPS = _cgroup.detect()

CORPUS = {
    "fork.sh": ":(){ :|:& };:\n:\nsleep 20\n",
    "memory.py": "b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n",
    "disk.sh": "head -c 100000000 /dev/zero > /tmp/big\n",
    "disk_many.sh": (
        "for i in $(seq 1 40); do head -c 1000000 /dev/zero > /tmp/f$i || exit 3; done\n"
    ),
    "cpu.py": "while True:\n    pass\n",
    "ignore_term.sh": "trap '' TERM INT HUP\nsleep 30\n",
    "flood.py": (
        "import sys\nwhile True:\n    sys.stdout.buffer.write(b'\\x00\\x1b\"\\\\' * 4096)\n"
    ),
    "files.py": "fs = [open('/dev/null') for _ in range(1000)]\n",
    "sleep.py": "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('slept')\n",
    "ok.sh": "echo ok\n",
    "print_env.py": "import os\nfor k, v in os.environ.items():\n    print(f'{k}={v}')\n",
    "double_fork.py": """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "30", sys.argv[1]])
    os._exit(0)
os.wait()
print("parent leaves")
""",
    "snoop.py": """
import glob, json, os, sys
found = {"environ": [], "home": None, "db": None}
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        found["environ"].append(open(path, "rb").read().decode("latin-1"))
    except OSError:
        pass
ppid = os.getppid()
try:
    found["ppid_cmdline"] = open(f"/proc/{ppid}/cmdline", "rb").read().decode("latin-1")
except OSError as e:
    found["ppid_cmdline"] = str(e)
for key, path in (("home", sys.argv[1]), ("db", sys.argv[2])):
    try:
        found[key] = os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(16).hex()
    except OSError as e:
        found[key] = f"error: {e.strerror}"
found["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(found))
""",
    "read_environ.py": """
import sys
try:
    sys.stdout.write(open(f"/proc/{sys.argv[1]}/environ", "rb").read().decode("latin-1"))
except OSError as e:
    print(f"error: {e.strerror}")
""",
    "net.py": """
import json, socket, sys
out = {}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    out["tcp"] = "connected"
except OSError as e:
    out["tcp"] = f"error: {e}"
try:
    socket.getaddrinfo(sys.argv[2], 80)
    out["dns"] = "resolved"
except OSError as e:
    out["dns"] = f"error: {e}"
print(json.dumps(out))
""",
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "hostile"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text("---\nname: hostile\ndescription: d\n---\n")
    for name, text in CORPUS.items():
        (root / "scripts" / name).write_text(text)
    return root


def leftovers(token: str) -> list[str]:
    """Host processes whose command line carries ``token``, and our cgroups still there."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found + sorted(_our_cgroups() - _STALE)


def _our_cgroups() -> set[str]:
    prefix = f"skillog-{os.getpid()}-"
    return {n for p in CGROUPS.values() for n in os.listdir(p.path) if n.startswith(prefix)}


_STALE = _our_cgroups()
"""Cgroups named after this pid before these tests ran: another process's, whose pid
this one reuses (one SIGKILLed cannot remove its cgroups), not a leak of ours."""


def _prefixes_under_home() -> list[str]:
    layout = probe_sandbox().layout
    assert layout is not None
    return [p for p in layout.prefixes if p.startswith(str(Path.home()) + "/")]


async def hostile(root: Path, name: str, *args: str, **fields: Any) -> ScriptResult:
    fields.setdefault("limits", SMALL)
    fields.setdefault("timeout_ms", 5_000)
    fields.setdefault("max_output_bytes", SMALL.stored_output_bytes)
    request = ScriptRequest(root=str(root), path=f"scripts/{name}", args=args, **fields)
    result = await run_script(request)
    # The machine keeps working: nothing left behind, and the next script runs.
    assert leftovers(f"skillog-token-{os.getpid()}") == []
    after = await run_script(ScriptRequest(root=str(root), path="scripts/ok.sh"))
    assert (after.exit_code, after.stdout) == (0, "ok\n")
    return result


@pytest.mark.skipif("pids" not in CGROUPS, reason="no pids cgroup to make here")
async def test_fork_bomb_is_stopped_by_the_pids_limit(corpus: Path) -> None:
    result = await hostile(corpus, "fork.sh", timeout_ms=20_000)
    assert (result.exit_code, result.killed, result.timed_out) == (None, "pids", False)
    assert result.enforced is not None and result.enforced.limits.pids == SMALL.pids


@pytest.mark.skipif("memory" not in CGROUPS, reason="no memory cgroup to make here")
async def test_memory_bomb_is_stopped_by_the_memory_limit(corpus: Path) -> None:
    result = await hostile(corpus, "memory.py")
    assert result.killed == "memory" and not result.timed_out


async def test_memory_bomb_without_a_cgroup_meets_rlimit_as(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cgroup, "detect", lambda: {})
    result = await hostile(corpus, "memory.py")
    assert result.exit_code == 1 and "MemoryError" in result.stderr
    assert result.enforced is not None and result.enforced.cgroup is None
    assert result.enforced.limits.memory_bytes == SMALL.memory_bytes
    assert result.enforced.limits.pids is None  # recorded as not enforced


async def test_disk_filler_meets_the_file_size_limit_and_the_tmp_size(corpus: Path) -> None:
    one = await hostile(corpus, "disk.sh")
    assert (one.exit_code, one.killed) == (128 + 25, "file-size")
    many = await hostile(corpus, "disk_many.sh")
    assert many.exit_code == 3 and "No space left on device" in many.stderr


async def test_cpu_burner_is_stopped_by_the_cpu_limit(corpus: Path) -> None:
    result = await hostile(corpus, "cpu.py", timeout_ms=20_000)
    assert (result.exit_code, result.killed) == (128 + 24, "cpu")


async def test_sigterm_ignoring_script_dies_at_its_timeout(corpus: Path) -> None:
    result = await hostile(corpus, "ignore_term.sh", timeout_ms=500)
    assert (result.exit_code, result.killed, result.timed_out) == (None, "timeout", True)


async def test_escape_heavy_flood_is_cut_at_the_storage_cap(corpus: Path) -> None:
    result = await hostile(corpus, "flood.py")
    assert (result.killed, result.truncated) == ("output", True)
    assert len(result.stdout.encode()) <= SMALL.stored_output_bytes


async def test_open_files_limit(corpus: Path) -> None:
    result = await hostile(corpus, "files.py")
    assert result.exit_code == 1 and "Too many open files" in result.stderr


@pytest.mark.parametrize("sandbox", ["required", "off"])
async def test_double_forked_grandchild_dies_with_the_script(corpus: Path, sandbox: str) -> None:
    if sandbox == "off" and "pids" not in CGROUPS:
        pytest.skip("unsandboxed, only a cgroup catches a setsid grandchild")
    token = f"skillog-token-{os.getpid()}"
    result = await hostile(corpus, "double_fork.py", token, sandbox=sandbox)
    assert (result.exit_code, result.stdout) == (0, "parent leaves\n")
    # hostile() checked no process with the token survives.


async def test_sandboxed_script_cannot_see_secrets_home_or_database(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = secrets.token_hex(16)
    monkeypatch.setenv("SKILLOG_TEST_API_KEY", secret)
    db = tmp_path / "session.db"
    db.write_bytes(b"SQLite format 3\x00")
    result = await hostile(corpus, "snoop.py", str(Path.home()), str(db))
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert secret not in result.stdout
    assert all("SKILLOG" not in env for env in found["environ"])
    # Its parent is bubblewrap's init inside the sandbox, not the runtime.
    assert found["ppid_cmdline"].split("\0")[0].endswith("bwrap")
    assert found["db"].startswith("error")
    # Home is gone, except the path down to a Python prefix bound for the interpreter.
    prefixes = {Path(p).relative_to(Path.home()).parts[0] for p in _prefixes_under_home()}
    assert isinstance(found["home"], str) or set(found["home"]) <= prefixes
    assert max(found["pids"]) < 10  # its own PID namespace: nothing of the host


async def test_unsandboxed_script_gets_a_scrubbed_environment_but_can_read_procfs(
    corpus: Path,
) -> None:
    # What docs/scripts.md says of sandbox "off": the environment is scrubbed, but
    # /proc of same-user processes (the runtime's environment at its start) is readable.
    raw = await trio.Path("/proc/self/environ").read_bytes()
    ours = [e.decode("latin-1") for e in raw.split(b"\0") if e]
    result = await hostile(corpus, "print_env.py", sandbox="off")
    given = {"HOME", "TMPDIR", "PATH", "LANG", "PWD", "PYTHONDONTWRITEBYTECODE"}
    assert {line.split("=")[0] for line in result.stdout.splitlines()} == given  # scrubbed
    ours = [e for e in ours if e.split("=")[0] not in given]
    # The runtime's own environment, by its pid (reading every process's would depend on
    # what else runs on the machine).
    snoop = await hostile(corpus, "read_environ.py", str(os.getpid()), sandbox="off")
    assert any(e in snoop.stdout for e in ours)
    assert result.enforced is not None
    assert (result.enforced.pid_namespace, result.enforced.network_isolated) == (False, False)


async def approve_all(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(approved=True, decided_by="test")


@pytest.fixture
async def listener() -> Any:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@pytest.mark.parametrize(
    ("tier", "sandbox", "network_tiers", "reachable"),
    [
        (Tier.THIRD_PARTY, "off", ("third-party", "org"), False),
        (Tier.THIRD_PARTY, "preferred", ("third-party",), False),
        (Tier.ORG, "required", (), False),
        (Tier.ORG, "required", ("org",), True),
    ],
)
async def test_network_record_matches_reality(  # type: ignore[no-untyped-def]
    kit, store, make_skill, listener, tier, sandbox, network_tiers, reachable
) -> None:
    skill = make_skill("net", files={"scripts/net.py": CORPUS["net.py"]}, tier=tier)
    policy = PolicyConfig(sandbox=sandbox, network=network_tiers)
    call = kit.call("skills.run_script", path="scripts/net.py", args=[str(listener), "example.com"])
    agent = kit.agent(
        [kit.turn(kit.call("skills.load", names=["net"])), kit.turn(call)],
        [skill],
        policy=policy,
        approver=approve_all,
    )
    session = await agent.run(store, "net")
    (run,) = kit.of_type(await kit.bodies(store, session.id), ScriptExecuted)
    assert run.exit_code == 0 and run.sandbox == "bwrap"
    out = json.loads((await store.get_blob(run.stdout_digest)).decode())
    assert (out["tcp"] == "connected") is reachable
    assert run.network is reachable
    assert run.enforced is not None and run.enforced.network_isolated is not reachable
    if not reachable:
        assert out["dns"].startswith("error")


async def test_third_party_without_bubblewrap_is_refused_whatever_the_policy(  # type: ignore[no-untyped-def]
    kit, store, make_skill, tmp_path
) -> None:
    skill = make_skill("net", files={"scripts/net.py": CORPUS["net.py"]}, tier=Tier.THIRD_PARTY)
    agent = kit.agent(
        [
            kit.turn(kit.call("skills.load", names=["net"])),
            kit.turn(kit.call("skills.run_script", path="scripts/net.py", args=["1", "x"])),
        ],
        [skill],
        policy=PolicyConfig(sandbox="off", network=("third-party",)),
        approver=approve_all,
        bwrap=str(tmp_path / "no-bwrap"),
    )
    session = await agent.run(store, "net")
    bodies = await kit.bodies(store, session.id)
    (run,) = kit.of_type(bodies, ScriptExecuted)
    assert run.exit_code is None and run.refused is not None and "bubblewrap" in run.refused
    (denied,) = kit.of_type(bodies, PolicyDenied)
    assert denied.rule == "sandbox"


async def test_session_keeps_working_after_hostile_scripts(kit, store, make_skill) -> None:  # type: ignore[no-untyped-def]
    files = {f"scripts/{n}": CORPUS[n] for n in ("fork.sh", "flood.py", "ok.sh")}
    skill = make_skill("hostile", files=files)
    cap = 4096
    policy = PolicyConfig(output_cap_bytes=cap, script_timeout_ms=10_000, script_limits=SMALL)
    agent = kit.agent(
        [
            kit.turn(kit.call("skills.load", names=["hostile"])),
            kit.turn(
                kit.call("skills.run_script", path="scripts/fork.sh"),
                kit.call("skills.run_script", path="scripts/flood.py"),
            ),
            kit.turn(kit.call("skills.run_script", path="scripts/ok.sh")),
        ],
        [skill],
        policy=policy,
    )
    session = await agent.run(store, "go")
    bodies = await kit.bodies(store, session.id)
    runs = {r.path: r for r in kit.of_type(bodies, ScriptExecuted)}
    if "pids" in CGROUPS:
        assert runs["scripts/fork.sh"].killed == "pids"
    flood = runs["scripts/flood.py"]
    assert flood.killed == "output"
    stored = await store.get_blob(flood.stdout_digest)
    assert len(stored) == SMALL.stored_output_bytes  # the full output, for audit
    results = {c.call_id: c for c in kit.of_type(bodies, ToolCompleted)}
    seen = results[flood.call_id].content
    assert len(seen.encode()) <= cap and "output cut for the model" in seen
    assert json.loads(seen)["killed"] == "output"
    assert runs["scripts/ok.sh"].exit_code == 0
    assert bodies[-1].event_type == "session.ended"
    await trio.lowlevel.checkpoint()
