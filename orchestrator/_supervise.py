"""Supervising one child process until it is over, whatever it does.

The child starts in a new session (so it leads its own process group) with stdin from
``/dev/null``. Its stdout and stderr are read concurrently into one shared byte budget.
The whole process group is killed with SIGKILL when the deadline passes, when the
output budget is exceeded, when the caller is cancelled, and — to reap background
stragglers — as soon as the child itself exits. The child is never reaped before the
group is signalled (a pidfd tells us it exited without reaping it), so the group id
cannot have been reused by an unrelated process when we signal it.

A process that leaves the group (``setsid``) escapes a group kill; inside the sandbox
the PID namespace catches those too (see ``docs/scripts.md``).

The child is forked from the thread that runs the event loop, not from a worker thread:
bubblewrap's ``--die-with-parent`` (``PR_SET_PDEATHSIG``) fires when the *thread* that
forked it ends, and trio retires idle worker threads after 10 seconds, which killed
every sandboxed script at about 10 s. The loop's thread lives as long as the runtime,
so the sandbox still dies with a crashed runtime and never before. The fork and exec
(``vfork``, about a millisecond) is the only blocking step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import IO

import trio

_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class Outcome:
    """How a supervised process ended.

    ``returncode`` is ``None`` when we killed it before it exited on its own; otherwise
    its exit status, with death by signal N reported as ``128 + N``.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    duration_ns: int


class _Group:
    """The child's process group, and whether we killed it before it exited."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exited = False
        self.killed_early = False
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # kernel < 5.3: fall back to reaping waits
            self.pidfd = None

    async def wait_exit(self, proc: subprocess.Popen[bytes]) -> None:
        if self.pidfd is not None:
            await trio.lowlevel.wait_readable(self.pidfd)
        else:  # waiting (not forking) on a worker thread is harmless
            await trio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)
        self.exited = True

    def kill(self) -> None:
        if not self.exited:
            self.killed_early = True
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class _Capture:
    """stdout and stderr chunks under one shared budget of ``cap`` bytes."""

    def __init__(self, cap: int, on_overflow: Callable[[], None]) -> None:
        self.cap = cap
        self.total = 0
        self.truncated = False
        self.on_overflow = on_overflow

    def take(self, sink: list[bytes], chunk: bytes | bytearray) -> bool:
        """Keep what fits; on overflow record it, kill, and tell the reader to stop."""
        room = self.cap - self.total
        if len(chunk) <= room:
            sink.append(bytes(chunk))
            self.total += len(chunk)
            return True
        sink.append(bytes(chunk[:room]))
        self.total = self.cap
        self.truncated = True
        self.on_overflow()
        return False


async def _pump(stream: trio.abc.ReceiveStream, sink: list[bytes], capture: _Capture) -> None:
    while chunk := await stream.receive_some(_READ_CHUNK):
        if not capture.take(sink, chunk):
            return


def _stream(pipe: IO[bytes] | None) -> trio.lowlevel.FdStream:
    """A pipe of the child as a trio stream that owns the file descriptor."""
    assert pipe is not None
    stream = trio.lowlevel.FdStream(os.dup(pipe.fileno()))
    pipe.close()
    return stream


async def supervise(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    timeout_ms: int,
    max_output_bytes: int,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Outcome:
    """Run ``argv`` to completion or death and report how it ended.

    Never leaves a process of the child's group running when it returns or raises
    (cancellation included). Raises ``OSError`` when the process cannot be started.
    """
    start = clock()
    await trio.lowlevel.checkpoint()
    # On the loop's thread (see the module docstring): a worker thread would take the
    # sandbox down with it when trio retires the thread.
    proc = subprocess.Popen(  # noqa: ASYNC220
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    stdout, stderr = _stream(proc.stdout), _stream(proc.stderr)
    group = _Group(proc.pid)
    capture = _Capture(max_output_bytes, group.kill)
    out: list[bytes] = []
    err: list[bytes] = []
    try:
        with trio.move_on_after(timeout_ms / 1000) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, stdout, out, capture)
                nursery.start_soon(_pump, stderr, err, capture)
                await group.wait_exit(proc)
                # Background children would hold the pipes open: end them now.
                group.kill()
    finally:
        group.kill()
        proc.kill()  # the leader too, should the group signal not have reached it
        with trio.CancelScope(shield=True):
            await stdout.aclose()
            await stderr.aclose()
            await group.wait_exit(proc)
            proc.wait()  # reaps: it has exited, so this does not block
        group.close()
    duration = clock() - start
    code = proc.returncode
    assert code is not None
    returncode = None if group.killed_early else (code if code >= 0 else 128 - code)
    return Outcome(
        returncode=returncode,
        stdout=b"".join(out),
        stderr=b"".join(err),
        timed_out=deadline.cancelled_caught,
        truncated=capture.truncated,
        duration_ns=duration,
    )
