"""Running a skill's script: validation, interpreter choice, sandbox decision, supervision.

:func:`run_script` never raises for bad input: a request it will not run comes back as a
:class:`ScriptResult` with ``refused`` set, so the runtime can record it and show it to
the model. It records no events itself. The rules are documented in ``docs/scripts.md``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec
import trio

from eventlog import SkillogError

from . import _cgroup
from ._limits import (
    Enforcement,
    ScriptLimits,
    check_limits,
    find_prlimit,
    killed_by_signal,
    rlimit_argv,
)
from ._paths import PathRefusedError, check_relative_path, is_inside, resolve_in_root, show_path
from ._sandbox import (
    ENV_MOUNT,
    SANDBOX_TMP,
    SKILL_MOUNT,
    SYSTEM_PATH,
    build_bwrap_argv,
    options_through_fd,
    probe_sandbox,
)
from ._supervise import supervise

SandboxPolicy = Literal["required", "preferred", "off"]
SandboxUsed = Literal["bwrap", "none"]

#: Interpreter by file extension (lowercased). Other files run directly when executable.
INTERPRETERS: Mapping[str, str] = {
    ".py": "python",
    ".sh": "bash",
    ".bash": "bash",
    ".js": "node",
    ".mjs": "node",
    ".cjs": "node",
}
#: Scripts must live below this directory of the skill (seed 002).
SCRIPTS_DIR = "scripts"

MAX_ARGS = 256
MAX_ARGS_BYTES = 128 * 1024
MAX_ENV_VARS = 64
MAX_ENV_BYTES = 64 * 1024
MAX_TIMEOUT_MS = 60 * 60 * 1000
MAX_OUTPUT_BYTES = 64 * 1024 * 1024

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names the runtime sets itself, or that make a shell, the loader or an interpreter run
# code of the caller's choosing. Compared case-insensitively.
_RESERVED_ENV = frozenset(
    {
        "PATH", "HOME", "TMPDIR", "TMP", "TEMP", "LANG", "LANGUAGE", "PWD", "OLDPWD",
        "SHELL", "USER", "LOGNAME", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4",
        "IFS", "CDPATH", "GLOBIGNORE", "PROMPT_COMMAND", "GCONV_PATH", "LOCPATH",
        "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN", "TZDIR", "PERLLIB",
        "PERL5LIB", "PERL5OPT", "RUBYLIB", "RUBYOPT", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
    }
)  # fmt: skip
_RESERVED_ENV_PREFIXES = (
    "LD_", "DYLD_", "PYTHON", "NODE_", "NPM_CONFIG_", "BASH_FUNC_", "LC_", "MALLOC_",
    "GLIBC_", "GIT_", "SKILLOG_",
)  # fmt: skip
_READ_CHUNK = 1 << 16


class ScriptRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What to run. ``root`` is the skill directory (absolute, trusted, from the registry);
    every other field may come from the model and is validated.

    ``path`` is relative to the root and below ``scripts/``; ``args`` are passed as argv
    (never through a shell); ``env`` is added to the scrubbed environment; ``workdir`` is
    relative to the root. ``sandbox``: ``"required"`` runs only inside bubblewrap (fail
    closed), ``"preferred"`` falls back to an unsandboxed run, ``"off"`` never sandboxes.
    ``network`` is only enforceable inside the sandbox. ``max_output_bytes`` is what
    the script may print in all (more kills it, ``killed="output"``); how much of it
    the model reads is the caller's business (``_tools.run``). ``limits`` are the
    resource limits (``docs/scripts.md``).
    """

    root: str
    path: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    workdir: str = "."
    timeout_ms: int = 30_000
    max_output_bytes: int = 1024 * 1024
    sandbox: SandboxPolicy = "required"
    network: bool = False
    limits: ScriptLimits = ScriptLimits()
    python_env: str | None = None  # the skill's own environment (a venv), host path


class ScriptResult(msgspec.Struct, frozen=True, kw_only=True):
    """What happened. ``exit_code`` is ``None`` when the script did not run or the runtime
    killed it (timeout, output cap, cancellation); a script ended by a signal of its own
    reports ``128 + signal`` (as shells and bubblewrap do). ``stdout``/``stderr`` are UTF-8
    decoded with replacement and together hold at most ``max_output_bytes`` bytes;
    ``truncated`` says the script wrote more. ``refused`` is the reason it did not run.
    ``killed`` names the limit that stopped it (``timeout``, ``output``, ``cpu``,
    ``memory``, ``pids``, ``file-size``); ``enforced`` is what was really in force.
    """

    path: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: int
    timed_out: bool
    truncated: bool
    sandbox: SandboxUsed
    refused: str | None = None
    killed: str | None = None
    enforced: Enforcement | None = None
    env: str | None = None  # the key of the skill's environment it ran with

    @classmethod
    def refusal(cls, path: str, reason: str) -> ScriptResult:
        """The result of a script that did not run, and why."""
        return cls(
            path=path,
            exit_code=None,
            stdout="",
            stderr="",
            duration_ms=0,
            timed_out=False,
            truncated=False,
            sandbox="none",
            refused=reason,
        )


SANDBOX_UNAVAILABLE = "policy requires a sandbox but bubblewrap is unavailable"
"""How a refusal for want of a sandbox begins, so callers can tell it from the others
without reading the rest of the message."""


class ScriptRefusedError(SkillogError):
    """A script request that will not be run; the message says why and what to do."""


def _check_strings(label: str, values: object, max_count: int, max_bytes: int) -> int:
    """Validate a sequence of argv/env strings; return their total UTF-8 size."""
    if not isinstance(values, tuple | list):
        raise ScriptRefusedError(f"{label} must be a list of strings")
    if len(values) > max_count:
        raise ScriptRefusedError(f"{label} has {len(values)} items; the limit is {max_count}")
    total = 0
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ScriptRefusedError(f"{label}[{i}] must be a string, got {type(value).__name__}")
        if "\x00" in value:
            raise ScriptRefusedError(f"{label}[{i}] contains a NUL byte; remove it")
        try:
            total += len(value.encode("utf-8")) + 1
        except UnicodeEncodeError:
            raise ScriptRefusedError(f"{label}[{i}] is not valid UTF-8 text") from None
    if total > max_bytes:
        raise ScriptRefusedError(f"{label} total {total} bytes; the limit is {max_bytes}")
    return total


def _check_env(env: object) -> None:
    if not isinstance(env, dict):
        raise ScriptRefusedError("env must be an object of string names to string values")
    if len(env) > MAX_ENV_VARS:
        raise ScriptRefusedError(f"env has {len(env)} variables; the limit is {MAX_ENV_VARS}")
    for name in env:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ScriptRefusedError(
                f"env name {show_path(name)} is not valid; use letters, digits and _ "
                "(not starting with a digit)"
            )
        upper = name.upper()
        if upper in _RESERVED_ENV or upper.startswith(_RESERVED_ENV_PREFIXES):
            raise ScriptRefusedError(
                f"env name {name!r} is reserved (it is set by the runtime or changes how "
                "the loader, a shell or an interpreter runs); see docs/scripts.md"
            )
    _check_strings("env values", list(env.values()), MAX_ENV_VARS, MAX_ENV_BYTES)


def _check_int(label: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ScriptRefusedError(f"{label} must be an integer from {low} to {high}")


def validate_request(request: ScriptRequest) -> None:
    """Check every field that does not need the filesystem (pure); raise
    :class:`ScriptRefusedError` on the first problem."""
    if not isinstance(request.root, str) or not os.path.isabs(request.root):
        raise ScriptRefusedError("the skill root must be an absolute path (a runtime bug)")
    _check_strings("args", request.args, MAX_ARGS, MAX_ARGS_BYTES)
    _check_env(request.env)
    _check_int("timeout_ms", request.timeout_ms, 1, MAX_TIMEOUT_MS)
    _check_int("max_output_bytes", request.max_output_bytes, 0, MAX_OUTPUT_BYTES)
    if request.sandbox not in ("required", "preferred", "off"):
        raise ScriptRefusedError("sandbox must be 'required', 'preferred' or 'off'")
    if not isinstance(request.network, bool):
        raise ScriptRefusedError("network must be true or false")
    problem = check_limits(request.limits)
    if problem is not None:
        raise ScriptRefusedError(problem)
    segments = check_relative_path(request.path)
    if len(segments) < 2 or segments[0] != SCRIPTS_DIR:
        raise PathRefusedError(
            request.path,
            "outside_scripts",
            "is not below the skill's scripts/ directory",
            "use a path such as scripts/extract.py",
        )


def interpreter_command(path: str, *, executable: bool) -> list[str]:
    """The argv prefix that runs the script at ``path`` (see :data:`INTERPRETERS`).

    ``[]`` means the file is executed directly. Raises :class:`ScriptRefusedError` for an
    unknown extension on a non-executable file, or a missing interpreter.
    """
    ext = os.path.splitext(path)[1].lower()
    tool = INTERPRETERS.get(ext)
    if tool is None:
        if executable:
            return []
        known = ", ".join(INTERPRETERS)
        raise ScriptRefusedError(
            f"{show_path(path)} has no known interpreter (extensions: {known}) and is not "
            "executable; rename it or set its executable bit"
        )
    if tool == "python":
        # -B: no __pycache__ written into the skill (its hash must not change);
        # -E -s: ignore PYTHON* variables and the user site directory.
        return [sys.executable, "-B", "-E", "-s"]
    found = shutil.which(tool, path=SYSTEM_PATH)
    if found is None:
        raise ScriptRefusedError(
            f"{tool} is needed for {ext} scripts but was not found on {SYSTEM_PATH}; install {tool}"
        )
    return [found]


def base_env(home: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The scrubbed environment: nothing from the parent process (pure)."""
    env = {
        "PATH": SYSTEM_PATH,
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra)
    return env


def _inside_path(root_real: str, real: str) -> str:
    """Where the host path ``real`` (inside ``root_real``) appears inside the sandbox."""
    rel = os.path.relpath(real, root_real)
    return SKILL_MOUNT if rel == "." else f"{SKILL_MOUNT}/{rel}"


@dataclass(frozen=True)
class _Plan:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    tmpdir: str | None
    cgroup: _cgroup.ScriptCgroup | None
    enforced: Enforcement
    pass_fds: tuple[int, ...] = ()


def _confine(
    request: ScriptRequest, *, sandboxed: bool
) -> tuple[list[str], list[str], _cgroup.ScriptCgroup | None, Enforcement]:
    """The wrappers that apply the limits: the cgroup join (outside the sandbox), the
    ``prlimit`` (just before the script), the cgroup made, and what they enforce."""
    limits = request.limits
    parents = _cgroup.detect()
    group = None
    if (limits.pids is not None and "pids" in parents) or (
        limits.memory_bytes is not None and "memory" in parents
    ):
        group = _cgroup.create(limits.pids, limits.memory_bytes, parents)
    in_group = group.dirs if group is not None else {}
    prlimit = find_prlimit()
    memory_by_rlimit = "memory" not in in_group and prlimit is not None
    outer = group.join_argv(shutil.which("sh", path=SYSTEM_PATH) or "/bin/sh") if group else []
    inner = rlimit_argv(prlimit, limits, memory_by_rlimit=memory_by_rlimit) if prlimit else []
    applied = ScriptLimits(
        cpu_s=limits.cpu_s if prlimit else None,
        memory_bytes=limits.memory_bytes if "memory" in in_group or memory_by_rlimit else None,
        pids=limits.pids if "pids" in in_group else None,
        file_bytes=limits.file_bytes if prlimit else None,
        open_files=limits.open_files if prlimit else None,
        stored_output_bytes=request.max_output_bytes,
    )
    enforced = Enforcement(
        sandbox="bwrap" if sandboxed else "none",
        network_isolated=sandboxed and not request.network,
        pid_namespace=sandboxed,
        limits=applied,
        cgroup=group.version if group else None,
    )
    return outer, inner, group, enforced


def _prepare(request: ScriptRequest, bwrap: str | None) -> _Plan:
    """Everything that touches the filesystem before the start (blocking; in a thread)."""
    script = resolve_in_root(request.root, request.path, kind="file")
    root_real = os.path.realpath(request.root)
    if not is_inside(str(script), os.path.join(root_real, SCRIPTS_DIR)):
        raise PathRefusedError(
            request.path,
            "outside_scripts",
            "resolves (through a symlink) outside the skill's scripts/ directory",
            "use a path such as scripts/extract.py",
        )
    workdir = resolve_in_root(request.root, request.workdir, kind="dir")
    prefix = interpreter_command(request.path, executable=os.access(script, os.X_OK))
    if not prefix:
        _check_startable(script)
    env_python: str | None = None
    if request.python_env is not None and prefix[:1] == [sys.executable]:
        env_python = os.path.join(request.python_env, "bin", "python")
    sandboxed = False
    if request.sandbox != "off":
        probe = probe_sandbox(bwrap)
        if probe.available:
            sandboxed = True
        elif request.sandbox == "required":
            raise ScriptRefusedError(
                f"{SANDBOX_UNAVAILABLE}: {probe.reason}; "
                "install bubblewrap (apt-get install bubblewrap) and allow user namespaces"
            )
    outer, inner, group, enforced = _confine(request, sandboxed=sandboxed)
    if sandboxed:
        assert probe.bwrap is not None and probe.layout is not None
        script_in = _inside_path(root_real, str(script))
        workdir_in = _inside_path(root_real, str(workdir))
        if env_python is not None:  # the venv, read-only at a path that names no host dir
            prefix = [f"{ENV_MOUNT}/bin/python", *prefix[1:]]
        command = [*inner, *prefix, script_in, *request.args]
        argv = build_bwrap_argv(
            bwrap=probe.bwrap,
            layout=probe.layout,
            skill_root=root_real,
            chdir=workdir_in,
            command=command,
            env=base_env(SANDBOX_TMP, request.env),
            network=request.network,
            disable_userns=probe.disable_userns,
            tmp_bytes=request.limits.file_bytes,
            extra_binds=[(request.python_env, ENV_MOUNT)] if request.python_env else [],
        )
        # Nothing of the host's working directory reaches the sandbox: bubblewrap is
        # the sandbox's PID 1 and its environment is /proc/1/environ there, so it (and
        # the cgroup's sh, which sets PWD) starts in /; its options (host paths) go
        # through a descriptor instead of its command line, /proc/1/cmdline.
        fd = os.memfd_create("skillog-bwrap-args", os.MFD_CLOEXEC)
        try:
            argv, options = options_through_fd(argv, command, fd)
            os.write(fd, options)  # an unlinked in-memory file: no size limit of a pipe
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        env = {"PATH": SYSTEM_PATH}
        return _Plan([*outer, *argv], env, "/", None, group, enforced, (fd,))
    tmpdir = tempfile.mkdtemp(prefix="skillog-script-")
    # No sandbox to die with the runtime: the kernel kills the script when it goes.
    setpriv = shutil.which("setpriv", path=SYSTEM_PATH)
    deathsig = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    if env_python is not None:
        prefix = [env_python, *prefix[1:]]
    argv = [*outer, *deathsig, *inner, *prefix, str(script), *request.args]
    return _Plan(argv, base_env(tmpdir, request.env), str(workdir), tmpdir, group, enforced)


def _cleanup(plan: _Plan) -> None:
    for fd in plan.pass_fds:
        os.close(fd)
    if plan.cgroup is not None:
        plan.cgroup.remove()
    if plan.tmpdir is not None:
        shutil.rmtree(plan.tmpdir, ignore_errors=True)


def _check_startable(script: Path) -> None:
    """A file run directly must be a ``#!`` script or an ELF binary: the wrappers that
    apply the limits exec it, so a failed exec would otherwise look like exit 126/127."""
    with open(script, "rb") as f:
        magic = f.read(4)
    if not (magic.startswith(b"#!") or magic == b"\x7fELF"):
        raise ScriptRefusedError(
            f"the script could not be started: {show_path(str(script.name))} is executable "
            "but neither a #! script nor an ELF binary; add a #! line"
        )


def _refused(request: ScriptRequest, reason: str) -> ScriptResult:
    path = request.path if isinstance(request.path, str) else show_path(request.path)
    return ScriptResult.refusal(path, reason)


async def run_script(request: ScriptRequest, *, bwrap: str | None = None) -> ScriptResult:
    """Run one skill script under the rules in ``docs/scripts.md`` and report the result.

    Never raises for a bad request or a misbehaving script: refusals (bad path, args, env,
    unknown interpreter, sandbox required but unavailable, not startable) come back with
    ``refused`` set and nothing run; non-zero exits, timeouts and output floods are fields
    of the result. Guarantees no process of the script outlives the call, including when
    the calling scope is cancelled (then ``trio.Cancelled`` propagates as usual).
    ``bwrap`` overrides where bubblewrap is looked for (tests use it to simulate its
    absence); ``None`` means :func:`~orchestrator.scripts._sandbox.find_bwrap`.
    """
    try:
        validate_request(request)
        plan = await trio.to_thread.run_sync(_prepare, request, bwrap)
    except SkillogError as e:
        return _refused(request, str(e))
    except OSError as e:  # e.g. no space left for the private tmp
        return _refused(request, f"the script could not be prepared: {e}")
    group = plan.cgroup
    try:
        outcome = await supervise(
            plan.argv,
            env=plan.env,
            cwd=plan.cwd,
            timeout_ms=request.timeout_ms,
            max_output_bytes=request.max_output_bytes,
            # A cgroup's counters are in memory (cgroupfs): reading them does not block.
            check=group.exceeded if group is not None else None,
            pass_fds=plan.pass_fds,
        )
        # A limit met in the last moments (an OOM kill that ended the script) shows in
        # the counters only now.
        late = group.exceeded() if group is not None else None
    except OSError as e:
        return _refused(request, f"the script could not be started: {e.strerror or e}")
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_cleanup, plan)
    code = outcome.returncode
    killed = outcome.killed or late
    if killed is None and code is not None:
        killed = killed_by_signal(code, plan.enforced.limits, outcome.cpu_ns)
    return ScriptResult(
        path=request.path,
        exit_code=code,
        stdout=outcome.stdout.decode("utf-8", "replace"),
        stderr=outcome.stderr.decode("utf-8", "replace"),
        duration_ms=outcome.duration_ns // 1_000_000,
        timed_out=outcome.timed_out,
        truncated=outcome.truncated,
        sandbox="bwrap" if plan.enforced.sandbox == "bwrap" else "none",
        killed=killed,
        enforced=plan.enforced,
    )
