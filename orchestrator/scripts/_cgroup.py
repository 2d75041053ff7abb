"""A cgroup per script, where the host lets us make one: process and memory caps on
the whole tree, and a truthful answer to "which limit stopped it".

RLIMIT_NPROC cannot cap a script's processes: it counts every process of the user (and
does not apply to root at all). A cgroup's ``pids.max`` counts exactly the script's
tree, and its ``memory`` controller caps the tree's memory with an OOM kill we can see
(``oom_kill`` in ``memory.events`` / ``memory.oom_control``). Detection looks for a
writable directory of the process's own cgroup where the controller is available: a
cgroup v2 directory with the controller in ``cgroup.subtree_control`` (a delegated
subtree), or a cgroup v1 hierarchy of that controller. Without one the limit is
recorded as not enforced (memory then falls back to RLIMIT_AS per process).

The script joins its cgroups itself before anything else runs (a ``/bin/sh`` line that
writes ``0`` to each ``cgroup.procs`` and execs the rest), so no process of it is ever
outside them. All blocking I/O; callers run it in a thread.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Controller = Literal["pids", "memory"]

# Joins every cgroup.procs given before "--", then execs the command after it.
JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo 0 >"$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class Parent:
    """A cgroup directory we may create children in, for one controller."""

    path: str
    version: Literal["v1", "v2"]


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(root, mount point, fstype, super options) of each cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], fields[4], tail[0], tail[2]))
    return found


def find_parents(mountinfo: str, self_cgroup: str) -> dict[Controller, list[Parent]]:
    """Candidate parent directories for each controller (pure: from the text of
    ``/proc/self/mountinfo`` and ``/proc/self/cgroup``)."""
    paths: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        paths["" if hid == "0" else names] = path
    out: dict[Controller, list[Parent]] = {"pids": [], "memory": []}
    for root, point, fstype, options in _mounts(mountinfo):
        if fstype == "cgroup2":
            own = paths.get("")
            version: Literal["v1", "v2"] = "v2"
            controllers: tuple[Controller, ...] = ("pids", "memory")
        else:
            name = next((n for n in options.split(",") if n in ("pids", "memory")), None)
            if name is None:
                continue
            own = next((p for k, p in paths.items() if name in k.split(",")), None)
            version, controllers = "v1", ("pids",) if name == "pids" else ("memory",)
        if own is None or not (own + "/").startswith(root.rstrip("/") + "/"):
            continue
        directory = os.path.normpath(point + "/" + own[len(root.rstrip("/")) :])
        for controller in controllers:
            out[controller].append(Parent(directory, version))
    return out


def _usable(parent: Parent, controller: Controller) -> bool:
    if parent.version == "v2":
        try:
            with open(os.path.join(parent.path, "cgroup.subtree_control")) as f:
                if controller not in f.read().split():
                    return False
        except OSError:
            return False
    probe = os.path.join(parent.path, f"skillog-probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        if controller == "pids":
            _write(probe, "pids.max", "max")
        else:  # v1 spells "no limit" as -1
            _write(probe, _memory_file(parent), "max" if parent.version == "v2" else "-1")
        return True
    except OSError:
        return False
    finally:
        os.rmdir(probe)


@functools.cache
def detect() -> dict[Controller, Parent]:
    """Where this process can make cgroups for each controller (probed once, cached)."""
    try:
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read()
        with open("/proc/self/cgroup") as f:
            own = f.read()
    except OSError:
        return {}
    found: dict[Controller, Parent] = {}
    for controller, parents in find_parents(mountinfo, own).items():
        usable = next((p for p in parents if _usable(p, controller)), None)
        if usable is not None:
            found[controller] = usable
    return found


def _memory_file(parent: Parent) -> str:
    return "memory.max" if parent.version == "v2" else "memory.limit_in_bytes"


def _write(directory: str, name: str, value: str) -> None:
    with open(os.path.join(directory, name), "w") as f:
        f.write(value)


def _counter(directory: str, name: str, key: str) -> int:
    try:
        with open(os.path.join(directory, name)) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


@dataclass
class ScriptCgroup:
    """The cgroups of one script run; ``dirs`` maps each controller to its directory."""

    dirs: dict[Controller, tuple[str, str]]  # controller -> (directory, version)

    @property
    def version(self) -> str | None:
        versions = sorted({v for _, v in self.dirs.values()})
        return "+".join(versions) or None

    def join_argv(self, shell: str) -> list[str]:
        """The prefix that puts the command into these cgroups before it runs."""
        procs = [os.path.join(d, "cgroup.procs") for d, _ in self.dirs.values()]
        return [shell, "-c", JOIN_SCRIPT, "skillog-join", *dict.fromkeys(procs), "--"]

    def exceeded(self) -> Literal["pids", "memory"] | None:
        """A limit the tree ran into (a fork refused, an OOM kill), if any."""
        if "memory" in self.dirs:
            directory, version = self.dirs["memory"]
            events = "memory.events" if version == "v2" else "memory.oom_control"
            if _counter(directory, events, "oom_kill") > 0:
                return "memory"
        if "pids" in self.dirs and _counter(self.dirs["pids"][0], "pids.events", "max") > 0:
            return "pids"
        return None

    def remove(self) -> None:
        """Kill whatever is still in the cgroups, then remove them."""
        for directory, _ in self.dirs.values():
            for _ in range(200):
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        pids = [int(p) for p in f.read().split()]
                    for pid in pids:
                        _kill(pid)
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)  # killed processes take a moment to leave


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def create(
    pids: int | None, memory_bytes: int | None, parents: dict[Controller, Parent]
) -> ScriptCgroup:
    """Make the cgroups for one run with the given caps (those with a parent)."""
    name = f"skillog-{os.getpid()}-{secrets.token_hex(6)}"
    made = ScriptCgroup({})
    wanted: Sequence[tuple[Controller, int | None]] = (("pids", pids), ("memory", memory_bytes))
    try:
        for controller, value in wanted:
            parent = parents.get(controller)
            if value is None or parent is None:
                continue
            directory = os.path.join(parent.path, name)
            if not os.path.isdir(directory):  # v2: one directory for both controllers
                os.mkdir(directory)
            made.dirs[controller] = (directory, parent.version)
            if controller == "pids":
                _write(directory, "pids.max", str(value))
            else:
                _write(directory, _memory_file(parent), str(value))
                swap = (
                    "memory.swap.max" if parent.version == "v2" else "memory.memsw.limit_in_bytes"
                )
                if os.path.exists(os.path.join(directory, swap)):
                    _write(directory, swap, "0" if parent.version == "v2" else str(value))
    except OSError:
        made.remove()
        raise
    return made
