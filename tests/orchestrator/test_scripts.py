"""run_script with real subprocesses, in the sandbox and without it."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from orchestrator.scripts import _run as _scripts
from orchestrator.scripts._run import ScriptRequest, ScriptResult, run_script
from orchestrator.scripts._sandbox import sandbox_available

HAVE_BWRAP = sandbox_available()
# Each behaviour runs in both modes: "required" must use bubblewrap, "off" must not.
MODES = [
    pytest.param(
        "required",
        marks=pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here"),
        id="bwrap",
    ),
    pytest.param("off", id="none"),
]
EXPECTED_SANDBOX = {"required": "bwrap", "off": "none"}

# The grandchild leaves a "started" mark at once (so a test knows it existed when the
# kill came) and an "outlived" mark after a delay (which must never appear once killed).
FORK_GRANDCHILD = """
import os, sys, time
marks, delay, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
pid = os.fork()
if pid == 0:
    open(os.path.join(marks, "started"), "w").close()
    time.sleep(delay)
    open(os.path.join(marks, "outlived"), "w").close()
    os._exit(0)
if mode == "wait":
    os.waitpid(pid, 0)
else:
    time.sleep(60)
"""


def make_skill(tmp_path: Path, files: dict[str, str], executable: tuple[str, ...] = ()) -> Path:
    root = tmp_path / "skill"
    for rel, text in {"SKILL.md": "---\nname: skill\n---\n", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in executable:
        (root / rel).chmod(0o755)
    return root


async def run(root: Path, path: str, **fields: Any) -> ScriptResult:
    return await run_script(ScriptRequest(root=str(root), path=path, **fields))


@pytest.mark.parametrize("sandbox", MODES)
@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("scripts/echo.py", "import sys\nprint(repr(sys.argv[1:]))\n"),
        ("scripts/echo.sh", 'for a in "$@"; do printf \'[%s]\' "$a"; done\n'),
        ("scripts/echo.js", "console.log(JSON.stringify(process.argv.slice(2)))\n"),
    ],
)
async def test_each_interpreter_gets_args_verbatim(
    tmp_path: Path, sandbox: str, path: str, source: str
) -> None:
    root = make_skill(tmp_path, {path: source})
    args = ("two words", 'it\'s "quoted"', "ünïcödé ✓", "$HOME", "; rm -rf /", "")
    result = await run(root, path, args=args, sandbox=sandbox)
    assert result.refused is None
    assert result.exit_code == 0, result.stderr
    assert result.sandbox == EXPECTED_SANDBOX[sandbox]
    out = result.stdout.strip()
    if path.endswith(".py"):
        assert out == repr(list(args))
    elif path.endswith(".sh"):
        assert out == "".join(f"[{a}]" for a in args)
    else:
        assert out == '["two words","it\'s \\"quoted\\"","ünïcödé ✓","$HOME","; rm -rf /",""]'


@pytest.mark.parametrize("sandbox", MODES)
async def test_executable_file_runs_directly(tmp_path: Path, sandbox: str) -> None:
    root = make_skill(
        tmp_path, {"scripts/tool": '#!/bin/sh\necho direct "$1"\n'}, executable=("scripts/tool",)
    )
    result = await run(root, "scripts/tool", args=("x y",), sandbox=sandbox)
    assert (result.exit_code, result.stdout) == (0, "direct x y\n")


async def test_executable_that_cannot_be_executed_is_refused(tmp_path: Path) -> None:
    root = make_skill(
        tmp_path, {"scripts/tool": "no shebang, not ELF"}, executable=("scripts/tool",)
    )
    result = await run(root, "scripts/tool", sandbox="off")
    assert result.exit_code is None
    assert result.refused is not None and "could not be started" in result.refused


async def test_unknown_extension_not_executable_is_refused(tmp_path: Path) -> None:
    root = make_skill(tmp_path, {"scripts/run.rb": "puts 1"})
    result = await run(root, "scripts/run.rb", sandbox="off")
    assert result.refused is not None
    assert "no known interpreter" in result.refused and ".py" in result.refused
    assert (result.exit_code, result.stdout, result.duration_ms) == (None, "", 0)


async def test_missing_interpreter_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_scripts, "SYSTEM_PATH", str(tmp_path / "empty-bin"))
    root = make_skill(tmp_path, {"scripts/x.js": "console.log(1)"})
    result = await run(root, "scripts/x.js", sandbox="off")
    assert result.refused is not None and "node is needed for .js scripts" in result.refused


@pytest.mark.parametrize("sandbox", MODES)
async def test_nonzero_exit_and_stderr_are_reported(tmp_path: Path, sandbox: str) -> None:
    root = make_skill(
        tmp_path, {"scripts/fail.py": "import sys\nprint('out')\nsys.exit('boom on stderr')\n"}
    )
    result = await run(root, "scripts/fail.py", sandbox=sandbox)
    assert result.exit_code == 1
    assert result.stdout == "out\n"
    assert result.stderr == "boom on stderr\n"
    assert not result.timed_out and not result.truncated and result.refused is None


@pytest.mark.parametrize("sandbox", MODES)
async def test_death_by_own_signal_is_128_plus_signal(tmp_path: Path, sandbox: str) -> None:
    root = make_skill(tmp_path, {"scripts/segv.sh": "kill -SEGV $$\n"})
    result = await run(root, "scripts/segv.sh", sandbox=sandbox)
    assert result.exit_code == 128 + 11


@pytest.mark.parametrize("sandbox", MODES)
async def test_stdin_is_empty_not_inherited(tmp_path: Path, sandbox: str) -> None:
    root = make_skill(tmp_path, {"scripts/read.py": "import sys\nprint(repr(sys.stdin.read()))\n"})
    result = await run(root, "scripts/read.py", sandbox=sandbox, timeout_ms=10_000)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "''\n", False)


async def test_undecodable_output_is_replaced(tmp_path: Path) -> None:
    src = "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end')\n"
    root = make_skill(tmp_path, {"scripts/bytes.py": src})
    result = await run(root, "scripts/bytes.py", sandbox="off")
    assert result.stdout == "ok \ufffd\ufffd end"


# --- timeouts, grandchildren, cancellation -------------------------------------------------


def marks(path: Path) -> set[str]:
    return set(os.listdir(path))


async def test_grandchild_marks_appear_when_not_killed(tmp_path: Path) -> None:
    """Control for the tests below: the marks really work."""
    root = make_skill(tmp_path, {"scripts/fork.py": FORK_GRANDCHILD})
    result = await run(root, "scripts/fork.py", args=(str(tmp_path), "0.1", "wait"), sandbox="off")
    assert result.exit_code == 0
    assert {"started", "outlived"} <= marks(tmp_path)


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    root = make_skill(tmp_path, {"scripts/fork.py": FORK_GRANDCHILD})
    result = await run(
        root, "scripts/fork.py", args=(str(tmp_path), "1.0", "sleep"), sandbox="off",
        timeout_ms=500,
    )  # fmt: skip
    assert result.timed_out and result.exit_code is None
    await trio.sleep(1.0)  # past the moment the grandchild would have written
    assert "started" in marks(tmp_path)  # it existed when the timeout struck
    assert "outlived" not in marks(tmp_path)


async def test_cancelling_the_caller_kills_the_whole_process_group(tmp_path: Path) -> None:
    root = make_skill(tmp_path, {"scripts/fork.py": FORK_GRANDCHILD})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                run, root, "scripts/fork.py", args=(str(tmp_path), "1.0", "sleep"), sandbox="off"
            )
        )
        with trio.fail_after(10):
            # Polling: a file appearing in another process sets no trio.Event.
            while "started" not in marks(tmp_path):  # noqa: ASYNC110
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await trio.sleep(1.0)
    assert "outlived" not in marks(tmp_path)


@pytest.mark.parametrize("sandbox", MODES)
async def test_background_leftovers_are_killed_when_the_script_exits(
    tmp_path: Path, sandbox: str
) -> None:
    # Without the group kill on exit, `sleep` would hold stdout open until the timeout.
    root = make_skill(tmp_path, {"scripts/bg.sh": "sleep 30 &\necho started\n"})
    result = await run(root, "scripts/bg.sh", sandbox=sandbox, timeout_ms=20_000)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "started\n", False)


# --- output cap --------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox", MODES)
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_flood_is_capped_and_killed(tmp_path: Path, sandbox: str, stream: str) -> None:
    src = f"import sys\nb = b'y' * 65536\nwhile True:\n    sys.{stream}.buffer.write(b)\n"
    root = make_skill(tmp_path, {"scripts/flood.py": src})
    result = await run(
        root, "scripts/flood.py", sandbox=sandbox, max_output_bytes=100_000, timeout_ms=20_000
    )
    assert result.truncated and not result.timed_out
    assert result.exit_code is None  # killed by the runtime
    assert getattr(result, stream) == "y" * 100_000
    assert len(result.stdout) + len(result.stderr) == 100_000


async def test_cap_is_shared_between_streams(tmp_path: Path) -> None:
    src = "import sys\nsys.stdout.write('o' * 600)\nsys.stderr.write('e' * 600)\n"
    root = make_skill(tmp_path, {"scripts/both.py": src})
    result = await run(root, "scripts/both.py", sandbox="off", max_output_bytes=1000)
    assert result.truncated
    # Which stream is read first is up to the scheduler; the budget is shared either way.
    assert len(result.stdout) + len(result.stderr) == 1000
    assert result.stdout == "o" * len(result.stdout)
    assert result.stderr == "e" * len(result.stderr)


async def test_output_exactly_at_the_cap_is_not_truncated(tmp_path: Path) -> None:
    root = make_skill(tmp_path, {"scripts/exact.py": "print('z' * 999)\n"})
    result = await run(root, "scripts/exact.py", sandbox="off", max_output_bytes=1000)
    assert (result.exit_code, result.truncated, len(result.stdout)) == (0, False, 1000)


async def test_zero_output_budget(tmp_path: Path) -> None:
    root = make_skill(tmp_path, {"scripts/quiet.py": "pass\n", "scripts/loud.py": "print(1)\n"})
    quiet = await run(root, "scripts/quiet.py", sandbox="off", max_output_bytes=0)
    loud = await run(root, "scripts/loud.py", sandbox="off", max_output_bytes=0)
    assert (quiet.exit_code, quiet.truncated) == (0, False)
    assert (loud.truncated, loud.stdout) == (True, "")


# --- environment -------------------------------------------------------------------------

PRINT_ENV = "import json, os\nprint(json.dumps(dict(os.environ), sort_keys=True))\n"


@pytest.mark.parametrize("sandbox", MODES)
async def test_environment_is_scrubbed(
    tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    root = make_skill(tmp_path, {"scripts/env.py": PRINT_ENV})
    result = await run(root, "scripts/env.py", sandbox=sandbox, env={"API_MODE": "test x=1"})
    assert "hunter2" not in result.stdout and "evil" not in result.stdout
    env = json.loads(result.stdout)
    env.pop("PWD", None)  # bubblewrap's --chdir sets it
    home = env["HOME"]
    assert env == {
        "API_MODE": "test x=1",
        "HOME": home,
        "LANG": "C.UTF-8",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": home,
    }
    if sandbox == "required":
        assert home == "/tmp"
    else:
        assert home != os.environ.get("HOME") and "skillog-script-" in home
        assert not await trio.Path(home).exists()  # the private tmp is removed afterwards


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"LD_PRELOAD": "/tmp/evil.so"}, "reserved"),
        ({"ld_preload": "/tmp/evil.so"}, "reserved"),
        ({"LD_LIBRARY_PATH": "/tmp"}, "reserved"),
        ({"PYTHONPATH": "/tmp"}, "reserved"),
        ({"PYTHONSTARTUP": "/tmp/x.py"}, "reserved"),
        ({"BASH_ENV": "/tmp/x"}, "reserved"),
        ({"ENV": "/tmp/x"}, "reserved"),
        ({"PATH": "/tmp"}, "reserved"),
        ({"HOME": "/root"}, "reserved"),
        ({"NODE_OPTIONS": "--require /tmp/x.js"}, "reserved"),
        ({"GLIBC_TUNABLES": "x"}, "reserved"),
        ({"BASH_FUNC_ls%%": "() { evil; }"}, "not valid"),
        ({"1ABC": "x"}, "not valid"),
        ({"A=B": "x"}, "not valid"),
        ({"": "x"}, "not valid"),
        ({"A B": "x"}, "not valid"),
        ({"OK": "a\x00b"}, "NUL"),
        ({"OK": 5}, "must be a string"),
        ({"OK": "x" * 70_000}, "limit"),
        ({f"V{i}": "x" for i in range(65)}, "limit"),
        ([("A", "b")], "must be an object"),
    ],
)
async def test_bad_env_is_refused(tmp_path: Path, env: object, fragment: str) -> None:
    root = make_skill(tmp_path, {"scripts/env.py": PRINT_ENV})
    result = await run(root, "scripts/env.py", sandbox="off", env=env)
    assert result.refused is not None and fragment in result.refused
    assert result.exit_code is None and result.stdout == ""


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("a\x00b",), "NUL"),
        ((1, 2), "must be a string"),
        ("not a list", "must be a list"),
        (("x",) * 300, "limit is 256"),
        (("x" * 200_000,), "limit is"),
        (("\udcff",), "UTF-8"),
    ],
)
async def test_bad_args_are_refused(tmp_path: Path, args: object, fragment: str) -> None:
    root = make_skill(tmp_path, {"scripts/a.py": "print(1)"})
    result = await run(root, "scripts/a.py", sandbox="off", args=args)
    assert result.refused is not None and fragment in result.refused


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"timeout_ms": 0}, "timeout_ms"),
        ({"timeout_ms": 1.5}, "timeout_ms"),
        ({"timeout_ms": True}, "timeout_ms"),
        ({"max_output_bytes": -1}, "max_output_bytes"),
        ({"sandbox": "maybe"}, "sandbox must be"),
        ({"network": "yes"}, "network must be"),
    ],
)
async def test_bad_limits_and_policy_are_refused(
    tmp_path: Path, fields: dict[str, object], fragment: str
) -> None:
    root = make_skill(tmp_path, {"scripts/a.py": "print(1)"})
    result = await run(root, "scripts/a.py", **{"sandbox": "off", **fields})
    assert result.refused is not None and fragment in result.refused


async def test_relative_root_is_refused() -> None:
    result = await run_script(ScriptRequest(root="relative/root", path="scripts/a.py"))
    assert result.refused is not None and "absolute" in result.refused


# --- paths -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../outside.py", "'..' segment"),
        ("/etc/passwd", "absolute"),
        ("scripts/../../outside.py", "'..' segment"),
        ("scripts/a\x00.py", "NUL"),
        ("scripts\\a.py", "backslash"),
        ("scripts/\uff41.py", "NFKC"),
        ("scripts/" + "a" * 2000, "longer than"),
        ("references/tool.py", "scripts/ directory"),
        ("SKILL.md", "scripts/ directory"),
        ("scripts", "scripts/ directory"),
        ("scripts/missing.py", "does not exist"),
        ("scripts/sub", "is a directory"),
        ("scripts/escape.py", "outside the skill root"),
        ("scripts/ref.py", "outside the skill's scripts/ directory"),
        ("scripts/fifo.sh", "FIFO"),
        (None, "expected a string"),
    ],
)
async def test_hostile_script_paths_are_refused(
    tmp_path: Path, path: object, fragment: str
) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("open('/tmp/pwned', 'w')")
    root = make_skill(tmp_path, {"scripts/sub/x.py": "", "references/tool.py": "print(1)"})
    (root / "scripts" / "escape.py").symlink_to(outside)
    (root / "scripts" / "ref.py").symlink_to("../references/tool.py")
    os.mkfifo(root / "scripts" / "fifo.sh")
    result = await run(root, path, sandbox="off")  # type: ignore[arg-type]
    assert result.refused is not None and fragment in result.refused, result.refused
    assert result.exit_code is None


@pytest.mark.parametrize("sandbox", MODES)
async def test_workdir_is_relative_to_the_skill_root(tmp_path: Path, sandbox: str) -> None:
    root = make_skill(tmp_path, {"scripts/pwd.py": "import os\nprint(os.getcwd())\n", "data/x": ""})
    top = await run(root, "scripts/pwd.py", sandbox=sandbox)
    data = await run(root, "scripts/pwd.py", sandbox=sandbox, workdir="data")
    base = "/skill" if sandbox == "required" else str(root)
    assert (top.stdout, data.stdout) == (f"{base}\n", f"{base}/data\n")


@pytest.mark.parametrize(
    ("workdir", "fragment"),
    [("..", "'..' segment"), ("/tmp", "absolute"), ("SKILL.md", "expected a directory"),
     ("nowhere", "does not exist"), ("up", "outside the skill root")],
)  # fmt: skip
async def test_bad_workdir_is_refused(tmp_path: Path, workdir: str, fragment: str) -> None:
    root = make_skill(tmp_path, {"scripts/a.py": "print(1)"})
    (root / "up").symlink_to(tmp_path)
    result = await run(root, "scripts/a.py", sandbox="off", workdir=workdir)
    assert result.refused is not None and fragment in result.refused


async def test_running_a_script_leaves_the_skill_unchanged(tmp_path: Path) -> None:
    # Python would otherwise write __pycache__ into scripts/, changing the skill hash.
    root = make_skill(
        tmp_path,
        {"scripts/main.py": "import helper\nprint(helper.X)\n", "scripts/helper.py": "X = 42\n"},
    )
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    result = await run(root, "scripts/main.py", sandbox="off")
    assert (result.exit_code, result.stdout) == (0, "42\n")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_result_is_a_frozen_float_free_struct() -> None:
    result = ScriptResult(
        path="scripts/a.py", exit_code=0, stdout="", stderr="", duration_ms=3,
        timed_out=False, truncated=False, sandbox="none",
    )  # fmt: skip
    encoded = msgspec.json.encode(result)
    assert msgspec.json.decode(encoded, type=ScriptResult) == result
    assert b"." not in encoded.replace(b"scripts/a.py", b"")
    with pytest.raises(AttributeError):
        result.exit_code = 1  # type: ignore[misc]


async def test_failure_to_prepare_is_a_refusal_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(prefix: str) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_scripts.tempfile, "mkdtemp", no_space)
    root = make_skill(tmp_path, {"scripts/a.py": "print(1)"})
    result = await run(root, "scripts/a.py", sandbox="off")
    assert result.refused is not None and "No space left on device" in result.refused
