"""The bubblewrap sandbox: probing for it and building its command line.

The sandbox shows a script only what an interpreter needs: the system directories
(``/usr`` and the ``/bin``, ``/lib*`` links or directories), a few ``/etc`` files, the
current Python's prefixes, the skill directory read-only at the fixed path
:data:`SKILL_MOUNT`, and a private writable tmpfs at ``/tmp``. Home directories, the
working tree, databases and every other host path do not exist inside. PID, IPC, UTS,
network (unless allowed), cgroup and user namespaces are unshared, every capability is
dropped, and the sandbox dies with its parent.

:func:`build_bwrap_argv` is pure; :func:`detect_host_layout` and :func:`probe_sandbox`
do the I/O (async callers run them through ``trio.to_thread.run_sync``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._paths import is_inside

#: The PATH scripts get, inside and outside the sandbox; also where tools are looked up.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Where the skill directory appears inside the sandbox (read-only).
SKILL_MOUNT = "/skill"
#: Where a skill's own environment (its venv) appears, read-only (docs/skills.md).
ENV_MOUNT = "/skill-env"
#: The private writable tmpfs inside the sandbox; also HOME and TMPDIR there.
SANDBOX_TMP = "/tmp"
#: Hostname inside the sandbox, so scripts see the same value on every machine.
SANDBOX_HOSTNAME = "skillog-sandbox"

# Top-level directories that merged-/usr systems make symlinks into /usr and others keep
# as real directories; either way the loader and interpreters need them.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the dynamic loader and interpreters read from /etc; nothing that names users,
# hosts or secrets.
_ETC_BASE = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
)
# Name resolution and TLS trust roots, only when the script may use the network.
_ETC_NETWORK = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
)
_PROBE_TIMEOUT_S = 10


@dataclass(frozen=True)
class HostLayout:
    """The host facts the sandbox command line depends on (see :func:`detect_host_layout`).

    ``links`` are ``(path, target)`` symlinks to recreate (``("/bin", "usr/bin")``),
    ``binds`` directories bound read-only at the same path, ``prefixes`` the current
    Python's installation directories (bound read-only at the same path, because Python
    finds its standard library by absolute path).
    """

    links: tuple[tuple[str, str], ...]
    binds: tuple[str, ...]
    prefixes: tuple[str, ...]


def detect_host_layout() -> HostLayout:
    """Look at the host's system directories and the running Python (blocking I/O)."""
    links: list[tuple[str, str]] = []
    binds = ["/usr"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            binds.append(path)
    candidates = {
        os.path.realpath(p)
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    candidates.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    # A prefix already visible through a system bind (/usr) needs no bind of its own.
    prefixes = sorted(
        p
        for p in candidates
        if os.path.isdir(p)
        and not any(is_inside(p, b) for b in binds)
        and not any(p != q and is_inside(p, q) for q in candidates)
    )
    return HostLayout(links=tuple(links), binds=tuple(binds), prefixes=tuple(prefixes))


def build_bwrap_argv(
    *,
    bwrap: str,
    layout: HostLayout,
    skill_root: str,
    chdir: str,
    command: Sequence[str],
    env: Mapping[str, str],
    network: bool,
    disable_userns: bool = True,
    tmp_bytes: int | None = None,
    extra_binds: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """The full ``bwrap`` command line running ``command`` in the sandbox (pure).

    ``skill_root`` is the host's real path of the skill, bound read-only at
    :data:`SKILL_MOUNT`; ``chdir`` and the paths in ``command`` are paths *inside* the
    sandbox. ``env`` replaces the environment entirely (``--clearenv``). With
    ``network=False`` the sandbox has its own network namespace with only a loopback
    interface; with ``network=True`` it shares the host's network and sees the ``/etc``
    files needed for name resolution and TLS. ``tmp_bytes`` caps the private ``/tmp``;
    ``extra_binds`` are ``(host, inside)`` directories bound read-only (a skill's
    environment).
    """
    argv = [bwrap, "--unshare-all", "--unshare-user"]
    if disable_userns:
        # No nested user namespaces: they are how sandboxed root regains capabilities.
        argv.append("--disable-userns")
    if network:
        argv.append("--share-net")
    argv += [
        "--die-with-parent",
        "--new-session",
        "--hostname",
        SANDBOX_HOSTNAME,
        # Root inside a user namespace still holds capabilities there, enough to remount
        # the skill directory read-write; drop them all.
        "--cap-drop",
        "ALL",
    ]
    # The private /tmp first: binds below land on top of it, so an interpreter prefix or
    # virtualenv that lives under /tmp on the host (a CI checkout) stays visible.
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if tmp_bytes is not None:
        argv += ["--size", str(tmp_bytes)]
    argv += ["--tmpfs", SANDBOX_TMP]
    for path in layout.binds:
        argv += ["--ro-bind", path, path]
    for path, target in layout.links:
        argv += ["--symlink", target, path]
    for path in (*_ETC_BASE, *(_ETC_NETWORK if network else ())):
        argv += ["--ro-bind-try", path, path]
    for path in layout.prefixes:
        argv += ["--ro-bind", path, path]
    for host, inside in extra_binds:
        argv += ["--ro-bind", host, inside]
    argv += [
        "--ro-bind",
        skill_root,
        SKILL_MOUNT,
        "--chdir",
        chdir,
        "--clearenv",
    ]
    for name in sorted(env):
        argv += ["--setenv", name, env[name]]
    argv += ["--", *command]
    return argv


def options_through_fd(
    argv: Sequence[str], command: Sequence[str], fd: int
) -> tuple[list[str], bytes]:
    """``argv`` (from :func:`build_bwrap_argv` for ``command``) with bubblewrap's options
    moved into the NUL-separated bytes it reads from ``fd`` (``--args FD``) (pure).

    A sandboxed process can read ``/proc/1/cmdline``, bubblewrap's own command line,
    which names host paths (the skill's real directory); read from a descriptor that
    bubblewrap closes before the script starts, they never reach the sandbox. Only
    ``bwrap --args FD -- COMMAND`` stays visible, and the command holds inside paths.
    """
    split = len(argv) - len(command) - 1  # the "--" before the command
    if split < 1 or argv[split] != "--" or list(argv[split + 1 :]) != list(command):
        raise ValueError("argv does not end with '--' and the command")
    data = b"".join(arg.encode() + b"\0" for arg in argv[1:split])
    return [argv[0], "--args", str(fd), *argv[split:]], data


def find_bwrap() -> str | None:
    """The bubblewrap binary on :data:`SYSTEM_PATH` (never the caller's own PATH)."""
    return shutil.which("bwrap", path=SYSTEM_PATH)


@dataclass(frozen=True)
class SandboxProbe:
    """Outcome of :func:`probe_sandbox`: ``reason`` is ``None`` when the sandbox works.

    ``layout`` is the host layout the probe succeeded with, reused for every script.
    """

    bwrap: str | None
    reason: str | None
    disable_userns: bool = False
    layout: HostLayout | None = None

    @property
    def available(self) -> bool:
        return self.reason is None


def _try(bwrap: str, layout: HostLayout, *, disable_userns: bool) -> str | None:
    true = shutil.which("true", path=SYSTEM_PATH) or "/bin/true"
    argv = build_bwrap_argv(
        bwrap=bwrap,
        layout=layout,
        skill_root="/usr",
        chdir=SKILL_MOUNT,
        command=[true],
        env={"PATH": SYSTEM_PATH},
        network=False,
        disable_userns=disable_userns,
    )
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            env={"PATH": SYSTEM_PATH},
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"{bwrap} could not be run ({e})"
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = message[0] if message else f"exit status {done.returncode}"
        return f"{bwrap} refused to create a sandbox ({detail})"
    return None


@functools.cache
def probe_sandbox(bwrap: str | None = None) -> SandboxProbe:
    """Find out, once per binary, whether bubblewrap can really create our sandbox.

    Runs a trivial command with the same isolation the scripts get; the answer is
    cached for the process. ``bwrap=None`` looks it up with :func:`find_bwrap`. A
    missing binary, or a kernel that refuses the namespaces, makes it unavailable and
    ``reason`` says why. Blocking (it starts a process).
    """
    path = find_bwrap() if bwrap is None else bwrap
    if path is None:
        return SandboxProbe(bwrap=None, reason=f"bwrap was not found on {SYSTEM_PATH}")
    if not os.access(path, os.X_OK):
        return SandboxProbe(bwrap=path, reason=f"{path} does not exist or is not executable")
    layout = detect_host_layout()
    # --disable-userns needs bubblewrap >= 0.8; older ones still give a sound sandbox.
    if _try(path, layout, disable_userns=True) is None:
        return SandboxProbe(bwrap=path, reason=None, disable_userns=True, layout=layout)
    reason = _try(path, layout, disable_userns=False)
    return SandboxProbe(bwrap=path, reason=reason, disable_userns=False, layout=layout)


def sandbox_available(bwrap: str | None = None) -> bool:
    """Whether scripts can run inside bubblewrap here (probed once, then cached)."""
    return probe_sandbox(bwrap).available
