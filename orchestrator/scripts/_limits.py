"""Resource limits for scripts: what policy asks for, and what was enforced.

A script's limits are one frozen, integer-only struct (:class:`ScriptLimits`), recorded
in the session's policy and, as *enforced*, in every ``script.executed`` event (a field
that could not be enforced is ``None`` there). Per-process limits are kernel rlimits,
set by util-linux ``prlimit`` exec'd just before the script (inside the sandbox when
there is one): a tiny C wrapper rather than ``preexec_fn``, which runs Python between
fork and exec and can deadlock a threaded program (the runtime has writer threads).
Limits on the whole process tree (processes, memory) come from cgroups (``_cgroup``).
See ``docs/scripts.md``.
"""

from __future__ import annotations

import shutil
from typing import Literal

import msgspec

from ._sandbox import SYSTEM_PATH

KilledBy = Literal["timeout", "output", "cpu", "memory", "pids", "file-size"]
"""Which limit stopped a script: the runtime (``timeout``, ``output``) or the kernel
(``cpu``: RLIMIT_CPU; ``file-size``: RLIMIT_FSIZE; ``memory``/``pids``: the script's
cgroup) ended it, and the runtime then killed its whole process tree."""


class ScriptLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Limits on one script run (besides its wall time and output caps).

    ``cpu_s``: CPU seconds per process (RLIMIT_CPU); ``memory_bytes``: memory of the
    whole tree (cgroup) or, without a memory cgroup, address space per process
    (RLIMIT_AS); ``pids``: processes and threads in the tree at once (cgroup
    ``pids.max``, counting bubblewrap's own two when sandboxed); ``file_bytes``: the
    largest file a process may write (RLIMIT_FSIZE) and the size of the sandbox's private
    ``/tmp``; ``open_files``: descriptors per process (RLIMIT_NOFILE);
    ``stored_output_bytes``: output kept in the blob store for audit (the model's share
    is the policy's ``output_cap_bytes``). ``None`` means unlimited (in a policy) or not
    enforced (in a record).
    """

    cpu_s: int | None = 60
    memory_bytes: int | None = 1 << 30
    pids: int | None = 128
    file_bytes: int | None = 64 << 20
    open_files: int | None = 256
    stored_output_bytes: int = 16 << 20


class LimitsOverride(msgspec.Struct, frozen=True, kw_only=True):
    """Some of :class:`ScriptLimits` for the skills of a policy override; a field left
    out inherits (``None`` still means unlimited)."""

    cpu_s: int | msgspec.UnsetType | None = msgspec.UNSET
    memory_bytes: int | msgspec.UnsetType | None = msgspec.UNSET
    pids: int | msgspec.UnsetType | None = msgspec.UNSET
    file_bytes: int | msgspec.UnsetType | None = msgspec.UNSET
    open_files: int | msgspec.UnsetType | None = msgspec.UNSET
    stored_output_bytes: int | msgspec.UnsetType = msgspec.UNSET


class Enforcement(msgspec.Struct, frozen=True, kw_only=True):
    """What was really in force while a script ran, as recorded in ``script.executed``.

    ``sandbox``: ``bwrap`` or ``none``; ``network_isolated``: the script had no route
    to any network (its own empty network namespace); ``pid_namespace``: it could see
    and signal no process outside its own; ``limits``: the limits applied (``None`` where
    not enforced); ``cgroup``: ``v1``/``v2`` when a cgroup held the tree, else ``None``.
    """

    sandbox: str
    network_isolated: bool
    pid_namespace: bool
    limits: ScriptLimits
    cgroup: str | None = None


MAX_LIMIT = 1 << 40


def check_limits(limits: object) -> str | None:
    """Why ``limits`` is not a valid :class:`ScriptLimits` (pure), or None."""
    if not isinstance(limits, ScriptLimits):
        return "limits must be a ScriptLimits"
    for field in limits.__struct_fields__:
        value = getattr(limits, field)
        if value is None and field != "stored_output_bytes":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
            return f"limits.{field} must be an integer from 1 to {MAX_LIMIT}"
    return None


def find_prlimit() -> str | None:
    """util-linux ``prlimit`` on :data:`SYSTEM_PATH` (visible inside the sandbox too)."""
    return shutil.which("prlimit", path=SYSTEM_PATH)


def rlimit_argv(prlimit: str, limits: ScriptLimits, *, memory_by_rlimit: bool) -> list[str]:
    """The ``prlimit`` prefix that sets the per-process limits, soft = hard (pure)."""
    argv = [prlimit]
    pairs = (
        ("--cpu", None if limits.cpu_s is None else f"{limits.cpu_s}:{limits.cpu_s + 1}"),
        ("--as", limits.memory_bytes if memory_by_rlimit else None),
        ("--fsize", limits.file_bytes),
        ("--nofile", limits.open_files),
    )
    argv += [f"{flag}={value}" for flag, value in pairs if value is not None]
    return [*argv, "--"]


def killed_by_signal(returncode: int, limits: ScriptLimits, cpu_ns: int) -> KilledBy | None:
    """Which kernel rlimit a script died of, from its exit status (128 + signal, as
    bubblewrap and shells report it) and the CPU time its tree used (pure)."""
    # SIGXCPU at the soft limit; SIGKILL at the hard one (a second later) if ignored.
    if limits.cpu_s is not None and (
        returncode == 128 + 24 or (returncode == 128 + 9 and cpu_ns >= limits.cpu_s * 1_000_000_000)
    ):
        return "cpu"
    if limits.file_bytes is not None and returncode == 128 + 25:  # SIGXFSZ
        return "file-size"
    return None
