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

import trio

_READ_CHUNK = 1 << 16
_WATCH_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Outcome:
    """How a supervised process ended.

    ``returncode`` is ``None`` when we killed it before it exited on its own; otherwise
    its exit status, with death by signal N reported as ``128 + N``. ``killed`` names
    why we killed it (``timeout``, ``output`` or what the ``check`` reported);
    ``cpu_ns`` is the CPU time of the child and the descendants it reaped.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    duration_ns: int
    killed: str | None = None
    cpu_ns: int = 0


class _Group:
    """The child's process group, and whether we killed it before it exited."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.pidfd: int | None = pidfd
        self.exited = False
        self.killed_early = False

    async def wait_exit(self) -> None:
        """Wait until the child exits, without reaping it."""
        assert self.pidfd is not None
        await trio.lowlevel.wait_readable(self.pidfd)
        self.exited = True

    async def reap(self, popen: subprocess.Popen[bytes]) -> tuple[int, int]:
        """Reap the (SIGKILLed or exited) child: its status as ``128 + signal`` or exit
        code, and the CPU time it and the descendants it reaped used."""
        self.kill()
        await self.wait_exit()
        code, cpu_ns = _reap_exited(self.pid)
        popen.returncode = code  # reaped here; tell Popen so it does not warn
        return (code if code >= 0 else 128 - code), cpu_ns

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


def _reap_exited(pid: int) -> tuple[int, int]:
    """Reap a child known to have exited (so this does not block)."""
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), round((usage.ru_utime + usage.ru_stime) * 1e9)


def _spawn(
    argv: Sequence[str], env: Mapping[str, str], cwd: str | None, pass_fds: Sequence[int] = ()
) -> tuple[subprocess.Popen[bytes], int, int, int]:
    """Start the child from the calling (trio) thread; return it and the read ends.

    Deliberately not ``trio.lowlevel.open_process``: that forks on a worker thread, and
    the parent-death signal (bubblewrap's ``--die-with-parent``) fires when the *thread*
    that forked exits, which trio does to idle workers after 10 s, killing every script
    at about 10 s. The trio thread lives as long as the runtime, so a crashed or killed
    runtime still takes its scripts with it. A fork/exec without ``preexec_fn`` uses
    vfork and takes well under a millisecond, short enough to do on the loop.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            env=dict(env),
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    try:
        pidfd = os.pidfd_open(popen.pid)  # Linux >= 5.3: exit seen without reaping
    except OSError:
        popen.kill()
        popen.wait()
        os.close(out_r)
        os.close(err_r)
        raise
    return popen, out_r, err_r, pidfd


async def supervise(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    timeout_ms: int,
    max_output_bytes: int,
    check: Callable[[], str | None] | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
    pass_fds: Sequence[int] = (),
) -> Outcome:
    """Run ``argv`` to completion or death and report how it ended.

    ``check`` is polled while the child runs; a non-None answer names a limit the child
    broke, and it is killed (``killed`` says which). Never leaves a process of the
    child's group running when it returns or raises (cancellation included). Raises
    ``OSError`` when the process cannot be started. ``pass_fds`` are descriptors the
    child inherits (besides its standard ones).
    """
    start = clock()
    popen, out_fd, err_fd, pidfd = _spawn(argv, env, cwd, pass_fds)
    group = _Group(popen.pid, pidfd)
    capture = _Capture(max_output_bytes, group.kill)
    out: list[bytes] = []
    err: list[bytes] = []
    broken: list[str] = []
    stdout = trio.lowlevel.FdStream(out_fd)
    stderr = trio.lowlevel.FdStream(err_fd)
    try:
        with trio.move_on_after(timeout_ms / 1000) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, stdout, out, capture)
                nursery.start_soon(_pump, stderr, err, capture)
                async with trio.open_nursery() as watching:
                    if check is not None:
                        watching.start_soon(_watch, check, group, broken)
                    await group.wait_exit()
                    watching.cancel_scope.cancel()
                # Background children would hold the pipes open: end them now.
                group.kill()
    finally:
        group.kill()
        with trio.CancelScope(shield=True):
            await stdout.aclose()
            await stderr.aclose()
            code, cpu_ns = await group.reap(popen)
        group.close()
    duration = clock() - start
    killed = (
        "timeout"
        if deadline.cancelled_caught
        else "output"
        if capture.truncated
        else broken[0]
        if broken
        else None
    )
    return Outcome(
        returncode=None if group.killed_early else code,
        stdout=b"".join(out),
        stderr=b"".join(err),
        timed_out=deadline.cancelled_caught,
        truncated=capture.truncated,
        duration_ns=duration,
        killed=killed,
        cpu_ns=cpu_ns,
    )


async def _watch(check: Callable[[], str | None], group: _Group, broken: list[str]) -> None:
    while True:
        await trio.sleep(_WATCH_INTERVAL_S)
        reason = check()
        if reason is not None:
            broken.append(reason)
            group.kill()
            return
