"""Scripts that run until a test lets them end: a skill script written with
:data:`GATED_SCRIPT` waits (at most a minute) for SIGUSR1, which :func:`release` sends
to it among a process's descendants. Waiting for a fixed time instead raced the test's
own processes on a loaded machine."""

from __future__ import annotations

import os
import signal
from pathlib import Path

GATED_SCRIPT = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))\n"
    "time.sleep(60)\n"
)


def running(root: int, script: str) -> list[int]:
    """The pids of the processes running ``script`` (a file name) under process ``root``,
    found among its descendants past bubblewrap (whose PID namespace hides nothing from
    the host's /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if Path(argv[0].decode()).name != "bwrap" and any(
                a.endswith(script.encode()) for a in argv
            ):
                found.append(pid)
    return sorted(found)


def release(root: int, script: str, *, at_most: int | None = None) -> int:
    """Let the gated ``script`` s running under process ``root`` end (all of them, or
    ``at_most``): SIGUSR1 to each. How many were released."""
    pids = running(root, script)[:at_most]
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    return len(pids)
