"""The bubblewrap sandbox, for real: what a script can see, write and reach."""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator.scripts._limits import ScriptLimits
from orchestrator.scripts._run import SandboxPolicy, ScriptRequest, ScriptResult, run_script
from orchestrator.scripts._sandbox import (
    SANDBOX_HOSTNAME,
    HostLayout,
    build_bwrap_argv,
    options_through_fd,
    probe_sandbox,
    sandbox_available,
)

HAVE_BWRAP = sandbox_available()
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here")
REPO = Path(__file__).resolve().parents[2]

LAYOUT = HostLayout(
    links=(("/bin", "usr/bin"), ("/lib", "usr/lib")),
    binds=("/usr",),
    prefixes=("/opt/python3.11",),
)


def argv(**overrides: Any) -> list[str]:
    fields: dict[str, Any] = {
        "bwrap": "/usr/bin/bwrap",
        "layout": LAYOUT,
        "skill_root": "/home/alice/skills/pdf",
        "chdir": "/skill",
        "command": ["/usr/bin/python3", "/skill/scripts/x.py", "--flag"],
        "env": {"PATH": "/usr/bin", "HOME": "/tmp"},
        "network": False,
    }
    return build_bwrap_argv(**{**fields, **overrides})


def pairs(args: list[str], option: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == option]


def test_argv_isolates_by_default() -> None:
    args = argv()
    assert args[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--new-session", "--clearenv"):  # fmt: skip
        assert flag in args
    assert "--share-net" not in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert args[args.index("--chdir") + 1] == "/skill"
    assert args[args.index("--tmpfs") + 1] == "/tmp"
    assert args[-4:] == ["--", "/usr/bin/python3", "/skill/scripts/x.py", "--flag"]


def test_argv_binds_only_what_an_interpreter_needs_read_only() -> None:
    args = argv()
    assert "--bind" not in args and "--dev-bind" not in args  # nothing host-writable
    ro = pairs(args, "--ro-bind")
    assert ("/home/alice/skills/pdf", "/skill") in ro
    assert ("/usr", "/usr") in ro and ("/opt/python3.11", "/opt/python3.11") in ro
    sources = {src for src, _ in ro} | {src for src, _ in pairs(args, "--ro-bind-try")}
    assert not {"/", "/home", "/root", "/etc", "/var", "/run", "/sys"} & sources
    assert pairs(args, "--symlink") == [("usr/bin", "/bin"), ("usr/lib", "/lib")]
    assert "/etc/resolv.conf" not in sources  # only with network


def test_argv_with_network_shares_it_and_adds_name_resolution() -> None:
    args = argv(network=True)
    assert "--share-net" in args
    assert ("/etc/resolv.conf", "/etc/resolv.conf") in pairs(args, "--ro-bind-try")


def test_argv_env_is_set_explicitly_and_in_a_stable_order() -> None:
    args = argv(env={"B": "2", "A": "1 ; $(x)"})
    assert pairs(args, "--setenv") == [("A", "1 ; $(x)"), ("B", "2")]
    assert argv(disable_userns=False).count("--disable-userns") == 0


def test_probe_reports_a_missing_binary(tmp_path: Path) -> None:
    probe = probe_sandbox(str(tmp_path / "no-bwrap"))
    assert not probe.available and "does not exist" in (probe.reason or "")


def test_probe_reports_a_kernel_refusal(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    probe = probe_sandbox(str(fake))
    assert not probe.available
    assert "No permissions to create new namespace" in (probe.reason or "")
    assert probe_sandbox(str(fake)) is probe  # probed once, then cached


@needs_bwrap
def test_probe_finds_a_working_bwrap() -> None:
    probe = probe_sandbox()
    assert probe.available and probe.bwrap is not None and probe.layout is not None


# --- policy: fail closed -----------------------------------------------------------------

WRITE_MARKER = "import sys\nopen(sys.argv[1], 'w').write('ran')\nprint('ran')\n"


def make_skill(tmp_path: Path, scripts: dict[str, str]) -> Path:
    root = tmp_path / "skill"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text("---\nname: skill\n---\n")
    for name, text in scripts.items():
        (root / "scripts" / name).write_text(text)
    return root


def fake_bwraps(tmp_path: Path) -> dict[str, str]:
    """A bwrap that is not installed, and one whose kernel refuses namespaces."""
    refusing = tmp_path / "refusing-bwrap"
    refusing.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    return {"missing": str(tmp_path / "missing-bwrap"), "refusing": str(refusing)}


async def run_marking(
    tmp_path: Path, sandbox: SandboxPolicy, bwrap: str | None
) -> tuple[ScriptResult, bool]:
    """Run a script that leaves a marker on the host; say whether it ran."""
    root = make_skill(tmp_path, {"mark.py": WRITE_MARKER})
    marker = tmp_path / "marker"
    request = ScriptRequest(
        root=str(root),
        path="scripts/mark.py",
        args=(str(marker),),
        sandbox=sandbox,
    )
    result = await run_script(request, bwrap=bwrap)
    return result, await trio.Path(marker).exists()


@pytest.mark.parametrize("why", ["missing", "refusing"])
async def test_required_sandbox_unavailable_fails_closed(tmp_path: Path, why: str) -> None:
    result, ran = await run_marking(tmp_path, "required", fake_bwraps(tmp_path)[why])
    assert not ran
    assert result.refused is not None
    assert "requires a sandbox" in result.refused
    assert "apt-get install bubblewrap" in result.refused
    assert (result.exit_code, result.stdout, result.sandbox) == (None, "", "none")


@pytest.mark.parametrize("why", ["missing", "refusing"])
async def test_preferred_sandbox_unavailable_runs_unsandboxed_and_says_so(
    tmp_path: Path, why: str
) -> None:
    result, ran = await run_marking(tmp_path, "preferred", fake_bwraps(tmp_path)[why])
    assert ran
    assert (result.refused, result.sandbox, result.exit_code) == (None, "none", 0)


@needs_bwrap
async def test_preferred_sandbox_available_is_used(tmp_path: Path) -> None:
    result, ran = await run_marking(tmp_path, "preferred", None)
    assert result.sandbox == "bwrap"
    assert not ran  # the host path of the marker does not even exist inside
    assert "FileNotFoundError" in result.stderr


async def test_sandbox_off_never_probes(tmp_path: Path) -> None:
    result, ran = await run_marking(tmp_path, "off", fake_bwraps(tmp_path)["refusing"])
    assert ran and result.sandbox == "none"


# --- inside the sandbox ------------------------------------------------------------------


async def sandboxed(tmp_path: Path, source: str, *args: str, **fields: Any) -> ScriptResult:
    root = make_skill(tmp_path, {"probe.py": source})
    request = ScriptRequest(
        root=str(root), path="scripts/probe.py", args=args, sandbox="required", **fields
    )
    result = await run_script(request)
    assert result.sandbox == "bwrap" and result.refused is None, result
    return result


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on the host's loopback; the kernel completes handshakes for it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    print("connected")
except OSError as e:
    print("blocked", type(e).__name__)
"""


@needs_bwrap
async def test_network_is_blocked_unless_allowed(tmp_path: Path, listener: socket.socket) -> None:
    port = str(listener.getsockname()[1])
    denied = await sandboxed(tmp_path / "a", CONNECT, port)
    allowed = await sandboxed(tmp_path / "b", CONNECT, port, network=True)
    assert denied.stdout.startswith("blocked")
    assert allowed.stdout == "connected\n"


WRITE_ATTEMPTS = """
import os
for path in ("/skill/new.txt", "/skill/scripts/probe.py", "/skill/SKILL.md"):
    try:
        with open(path, "a") as f:
            f.write("tampered")
        print("WROTE", path)
    except OSError as e:
        print("refused", path, e.strerror)
"""


@needs_bwrap
async def test_skill_directory_is_read_only(tmp_path: Path) -> None:
    result = await sandboxed(tmp_path, WRITE_ATTEMPTS)
    assert "WROTE" not in result.stdout
    assert result.stdout.count("Read-only file system") == 3
    root = tmp_path / "skill"
    assert not (root / "new.txt").exists()
    assert (root / "SKILL.md").read_text() == "---\nname: skill\n---\n"


def host_paths_that_exist(tmp_path: Path) -> list[str]:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET")
    candidates = [
        str(secret),
        str(REPO / "pyproject.toml"),
        str(REPO / ".git"),
        str(Path.home() / ".bashrc"),
        "/etc/passwd",
        "/etc/shadow",
        "/etc/hostname",
        "/var",
        "/home",
        "/run",
        "/sys/kernel",
    ]
    return [p for p in candidates if os.path.exists(p)]


LIST_VISIBLE = """
import json, os, sys
print(json.dumps([p for p in sys.argv[1:] if os.path.exists(p)]))
"""


@needs_bwrap
async def test_host_directories_are_invisible(tmp_path: Path) -> None:
    present = host_paths_that_exist(tmp_path)
    assert str(tmp_path / "outside" / "secret.txt") in present
    result = await sandboxed(tmp_path, LIST_VISIBLE, *present)
    assert json.loads(result.stdout) == []


PRIVATE_TMP = """
import os, tempfile
with open("/tmp/scratch.txt", "w") as f:
    f.write("scratch")
with tempfile.NamedTemporaryFile(dir=os.environ["TMPDIR"]) as f:
    pass
print(open("/tmp/scratch.txt").read(), os.environ["HOME"])
"""


@needs_bwrap
async def test_private_tmp_is_writable_and_private(tmp_path: Path) -> None:
    existed = await trio.Path("/tmp/scratch.txt").exists()
    result = await sandboxed(tmp_path, PRIVATE_TMP)
    assert (result.exit_code, result.stdout) == (0, "scratch /tmp\n")
    assert await trio.Path("/tmp/scratch.txt").exists() == existed  # not the host's /tmp


ISOLATION = """
import ctypes, os, socket
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
pids = [p for p in os.listdir("/proc") if p.isdigit()]
libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 2, 4, 32, 4096  # keep the locked flags
flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV  # read-write: needs CAP_SYS_ADMIN
remounted = libc.mount(None, b"/skill", None, flags, None) == 0
print(caps, len(pids) <= 5, socket.gethostname(), remounted)
"""


@needs_bwrap
async def test_no_capabilities_own_pids_fixed_hostname(tmp_path: Path) -> None:
    result = await sandboxed(tmp_path, ISOLATION)
    assert result.stdout.split() == ["0000000000000000", "True", SANDBOX_HOSTNAME, "False"]


@needs_bwrap
async def test_without_disable_userns_dropped_capabilities_still_keep_skill_read_only(
    tmp_path: Path,
) -> None:
    # bubblewrap < 0.8 has no --disable-userns (which also nests the script one user
    # namespace deeper); then only --cap-drop ALL stops root from remounting /skill.
    probe = probe_sandbox()
    assert probe.bwrap is not None and probe.layout is not None
    root = make_skill(tmp_path, {"probe.py": ISOLATION})
    command = build_bwrap_argv(
        bwrap=probe.bwrap,
        layout=probe.layout,
        skill_root=str(root),
        chdir="/skill",
        command=[sys.executable, "/skill/scripts/probe.py"],
        env={"PATH": "/usr/bin:/bin"},
        network=False,
        disable_userns=False,
    )
    done = await trio.run_process(command, capture_stdout=True, capture_stderr=True)
    assert done.stdout.decode().split() == ["0000000000000000", "True", SANDBOX_HOSTNAME, "False"]


@needs_bwrap
async def test_current_python_and_its_packages_work_inside(tmp_path: Path) -> None:
    result = await sandboxed(tmp_path, "import msgspec, sys\nprint(sys.prefix)\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == sys.prefix


# Like the grandchild in test_scripts.py, but it leaves the process group and reports
# over TCP: the sandbox cannot write to the host. "started" at once, "outlived" later.
ESCAPING_GRANDCHILD = """
import os, socket, sys, time
port, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
def report(word):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(word.encode())
pid = os.fork()
if pid == 0:
    os.setsid()  # leaves the process group: only the PID namespace can catch it now
    report("started")
    time.sleep(delay)
    report("outlived")
    os._exit(0)
if mode == "wait":
    os.waitpid(pid, 0)
else:
    time.sleep(60)
"""


def reports(listener: socket.socket, seen: list[str]) -> list[str]:
    """Add the words of the connections that have arrived to ``seen``; return it."""
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return seen
        with conn:
            conn.setblocking(True)
            conn.settimeout(2)
            seen.append(conn.recv(64).decode())


@needs_bwrap
async def test_timeout_kills_grandchildren_that_left_the_group(
    tmp_path: Path, listener: socket.socket
) -> None:
    port = str(listener.getsockname()[1])
    control = await sandboxed(
        tmp_path / "a", ESCAPING_GRANDCHILD, port, "0.05", "wait", network=True
    )
    assert control.exit_code == 0
    assert reports(listener, []) == ["started", "outlived"]  # the reports work
    killed = await sandboxed(
        tmp_path / "b", ESCAPING_GRANDCHILD, port, "1.0", "sleep", network=True, timeout_ms=500
    )
    assert killed.timed_out and killed.exit_code is None
    await trio.sleep(1.0)
    assert reports(listener, []) == ["started"]


@needs_bwrap
async def test_cancelling_the_caller_kills_grandchildren_that_left_the_group(
    tmp_path: Path, listener: socket.socket
) -> None:
    port = str(listener.getsockname()[1])
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                sandboxed, tmp_path, ESCAPING_GRANDCHILD, port, "1.0", "sleep", network=True
            )
        )
        with trio.fail_after(10):
            # Polling: a connection queued on a plain socket sets no trio.Event.
            while "started" not in reports(listener, seen):  # noqa: ASYNC110
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await trio.sleep(1.0)
    assert reports(listener, seen) == ["started"]


def test_private_tmp_is_mounted_before_the_binds() -> None:
    # A virtualenv or interpreter under /tmp on the host (a CI checkout in /tmp) must stay
    # visible: bwrap applies mounts in order, so the tmpfs must come first.
    args = argv(layout=HostLayout(links=(), binds=("/usr",), prefixes=("/tmp/ci/.venv",)))
    tmpfs = args.index("--tmpfs")
    binds = [i for i, a in enumerate(args) if a == "--ro-bind"]
    assert all(i > tmpfs for i in binds)
    assert ("/tmp/ci/.venv", "/tmp/ci/.venv") in pairs(args, "--ro-bind")


def test_options_go_through_a_descriptor_and_only_the_command_stays() -> None:
    command = ["/usr/bin/python3", "/skill/scripts/x.py", "--"]
    full = argv(command=command, env={"A": "--", "PATH": "/usr/bin"})
    short, data = options_through_fd(full, command, 7)
    assert short == ["/usr/bin/bwrap", "--args", "7", "--", *command]
    assert data.split(b"\0")[:-1] == [a.encode() for a in full[1 : -len(command) - 1]]
    assert b"/home/alice/skills/pdf\0/skill\0" in data and data.endswith(b"\0")
    with pytest.raises(ValueError):
        options_through_fd(full, ["/bin/other"], 7)


WHAT_PID_1_SHOWS = """
import json, os
def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")
print(json.dumps({
    "environ": read("/proc/1/environ"),
    "cmdline": read("/proc/1/cmdline"),
    "env": dict(os.environ),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
}))
"""


@needs_bwrap
@pytest.mark.parametrize("limits", [ScriptLimits(), ScriptLimits(pids=64, memory_bytes=1 << 29)])
async def test_no_host_path_reaches_the_sandbox_through_pid_1_or_the_env(
    tmp_path: Path, limits: ScriptLimits, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host's working directory was PWD in /proc/1/environ (bubblewrap's own, set by
    # the cgroup's sh), and the skill's real path was in /proc/1/cmdline.
    cwd = tmp_path / "host-working-dir"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = await sandboxed(tmp_path, WHAT_PID_1_SHOWS, limits=limits)
    seen = json.loads(result.stdout)
    assert str(tmp_path) not in result.stdout, seen
    assert "PWD=/\0" in seen["environ"] or "PWD" not in seen["environ"]
    assert seen["env"]["PWD"] == "/skill"
    assert "/skill/scripts/probe.py" in seen["cmdline"]
    assert seen["fds"] == [0, 1, 2, 3]  # 3: the listing's own; bwrap's options are not left open
