"""The stdio transport of ``skillog mcp serve``, on trio's own pipes.

The SDK's ``stdio_server`` reads and writes through anyio's file wrappers: every line
read, every write and every flush is a trip to a worker thread and back, three per
call answered, and two tasks relay each message through memory streams. An MCP client
starts its server with pipes (or a socket), and trio waits on those descriptors
itself: here a message is read, parsed and handed to the server in the caller's task,
and a reply is written in the sender's, with no thread and no relay. Standard streams
that are something else (a regular file as stdin, say) keep the SDK's transport.

As in the SDK, the wire is served from private duplicates of fds 0 and 1 while fd 0
reads the null device and fd 1 writes to stderr, so nothing a handler or a child
process prints can corrupt the protocol; both are restored on exit.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Self

import anyio
import mcp.types as types
import trio
from mcp.shared.message import SessionMessage

from orchestrator._lines import MAX_LINE, LineSplitter
from orchestrator._lines import Stream as _Stream

if TYPE_CHECKING:
    from ._lane import Lane

Streams = tuple[Any, Any]
CHUNK = 1 << 16
OPENING_LIMIT = 8
"""How many messages :meth:`LineReader.opening` looks at for the client's first
request (the SDK's era detection keeps as many)."""


def _parsed(line: bytes | SessionMessage | Exception) -> SessionMessage | Exception:
    if not isinstance(line, bytes):
        return line
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as e:  # the client's bytes: the server answers with the error
        return e
    return SessionMessage(message)


def servable(fd: int) -> bool:
    """Whether trio can wait on ``fd`` (a pipe or a socket, not a file or a tty)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class LineReader(_Stream):
    """The server's read stream: one JSON-RPC message per line of the wire (a line
    that does not parse is handed on as the error, as the SDK's transport does)."""

    def __init__(self, wire: trio.lowlevel.FdStream) -> None:
        self._wire = wire
        self._splitter = LineSplitter(MAX_LINE)
        self._lines: list[bytes | SessionMessage | Exception] = []  # parsed when peeked
        self._eof = False
        self._drained = False  # the last read returned less than it asked for
        self.lane: Lane | None = None
        """Offered each line before the SDK gets it (mcp_server/_lane.py)."""

    async def receive(self) -> SessionMessage | Exception:
        if self._lines:
            # A line already read: let the tasks the last message woke run first (a
            # cancellation acts before the message behind it), as a read would.
            await trio.lowlevel.checkpoint()
        while True:
            while not self._lines:
                if not await self._more():
                    if self.lane is not None:
                        self.lane.close()
                    raise anyio.EndOfStream
            line = self._lines.pop(0)
            if not (isinstance(line, bytes) and self.lane is not None and self.lane.take(line)):
                return _parsed(line)
            if self._lines:
                await trio.lowlevel.checkpoint()  # as above, for the line behind it

    async def opening(self) -> types.JSONRPCRequest | None:
        """The client's first request, left to be received with the messages before
        it; None when the wire ends, or OPENING_LIMIT messages come, before one."""
        for index in range(OPENING_LIMIT):
            while index >= len(self._lines):
                if not await self._more():
                    return None
            item = self._lines[index] = _parsed(self._lines[index])
            if isinstance(item, SessionMessage) and isinstance(item.message, types.JSONRPCRequest):
                return item.message
        return None

    async def _more(self) -> bool:
        """Read more of the wire into lines; False at its end."""
        if self._eof:
            return False
        data = await self._read()
        if data:
            self._take(data)
            return True
        self._eof = True
        last = self._splitter.end()
        if last is None or not last.strip():
            return False
        self._lines.append(last)  # a last line without \n
        return True

    async def _read(self) -> bytes:
        """The wire's next bytes (empty at its end). Bytes already there are read with
        a checkpoint, as any read; otherwise waiting for them is the checkpoint (trio's
        ``receive_some`` yields once more first: a scheduler pass per message, for
        nothing, while the client waits for a reply)."""
        fd = self._wire.fileno()
        waited = self._drained
        if waited:  # the last read took all there was: a read now would find nothing
            await trio.lowlevel.wait_readable(fd)
        while True:
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
                waited = True
                continue
            except OSError as e:
                if e.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the wire was closed") from None
                return b""  # the client's end reset: as a close
            self._drained = len(data) < CHUNK
            if not waited:
                await trio.lowlevel.checkpoint()
            return data

    def _take(self, data: bytes) -> None:
        """Split ``data`` into the lines it ends (blank ones skipped); a line over
        MAX_LINE is dropped as it comes, and handed on as the error."""
        for line in self._splitter.feed(data):
            if line is None:
                self._lines.append(
                    ValueError(
                        f"a message line over {MAX_LINE} bytes was dropped; send smaller messages"
                    )
                )
            elif line.strip():
                self._lines.append(line)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._eof = True


class LineWriter(_Stream):
    """The server's write stream: each message as one line, written by the task that
    sends it (one at a time: responses and notifications come from many tasks)."""

    def __init__(self, wire: trio.lowlevel.FdStream) -> None:
        self._wire = wire
        # A semaphore, not a lock: a reply :meth:`write_soon` could not write whole
        # is finished by another task, which releases what the writing task took.
        self._lock = trio.Semaphore(1, max_value=1)
        # Held for each write to the descriptor, from this thread or another
        # (:meth:`write_now`), and for what it tells: a line is half-written, or the
        # wire is closed (its descriptor may then be reused).
        self._wire_lock = threading.Lock()
        self._partial = False  # a line this thread is writing is half-written
        self._rest = b""  # what the wire did not take of a line write_now began
        self._closed = False
        self.nursery: trio.Nursery | None = None
        """Where :meth:`write_soon` finishes a write the pipe did not take at once."""

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        line = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()
        try:
            await self._write(memoryview(line.encode()))
        finally:
            self._lock.release()

    def write_soon(self, line: bytes) -> None:
        """Write ``line`` (a whole message line) now when the pipe takes it, else from
        a task in :attr:`nursery`, in turn with :meth:`send`; dropped once the wire is
        closed or the client gone. Never raises: the caller is the session's loop."""
        if self._closed:
            return
        data = memoryview(line)
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            self._finish_soon(data, held=False)
            return
        try:
            data = self._write_some(data)
        except OSError:
            self._lock.release()
            return  # the client is gone
        if data:
            self._finish_soon(data, held=True)
        else:
            self._lock.release()

    def _finish_soon(self, data: memoryview, *, held: bool) -> None:
        if self.nursery is None:
            if held:
                self._lock.release()
            return
        self.nursery.start_soon(self._finish, data, held)

    async def _finish(self, data: memoryview, held: bool) -> None:
        if not held:
            await self._lock.acquire()
        try:
            if not self._closed:
                await self._write(data)
        except (anyio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client is gone, or the wire closed: the SDK drops its replies too
        finally:
            self._lock.release()

    async def _write(self, data: memoryview) -> None:
        """All of ``data``, without yielding when the pipe takes it at once (a reply
        is small): trio's ``send_all`` yields first, and taking the lock yields too,
        two scheduler passes per reply for nothing."""
        while True:
            try:
                data = self._write_some(data)
            except OSError as e:
                # The client is gone: the SDK's way of saying so (it stops writing).
                raise anyio.BrokenResourceError from e
            if not data:
                return
            await trio.lowlevel.wait_writable(self._wire.fileno())

    def _write_some(self, data: memoryview) -> memoryview:
        """Write what the wire takes now of ``data``, behind what it did not take of a
        line :meth:`write_now` began; returns what is left (the caller writes it next:
        nothing goes between). OSError as os.write, but a full wire is none."""
        with self._wire_lock:
            if self._closed:
                raise BrokenPipeError(errno.EPIPE, "the wire was closed")
            if self._rest:
                data, self._rest = memoryview(self._rest + data), b""
            with contextlib.suppress(BlockingIOError):
                data = data[os.write(self._wire.fileno(), data) :]
            self._partial = bool(data)
            return data

    def write_now(self, line: bytes) -> bool:
        """Write ``line`` (a whole message line) from any thread, when no other line is
        half-written and the wire takes at least some of it at once; what it did not
        take is written ahead of the next line (:meth:`finish_soon`). False, with
        nothing written, otherwise: the caller then writes it from the trio thread.
        The store's writer thread writes a reply here as its outcome becomes durable."""
        with self._wire_lock:
            if self._closed or self._partial or self._rest:
                return False
            try:
                taken = os.write(self._wire.fileno(), line)
            except OSError:  # full (nothing written), or the client is gone
                return False
            self._rest = line[taken:]
        return True

    def finish_soon(self) -> None:
        """Write what the wire did not take of a line :meth:`write_now` wrote, if any
        (in turn with :meth:`send`, as :meth:`write_soon`)."""
        if self._rest:
            self.write_soon(b"")

    def close_wire(self) -> None:
        """Nothing is written to the descriptor from now on (it may be reused)."""
        with self._wire_lock:
            self._closed = True

    async def aclose(self) -> None:
        self._closed = True


@contextlib.asynccontextmanager
async def stdio_streams() -> AsyncIterator[Streams]:
    """The server's read and write streams over this process's stdin and stdout."""
    if not (servable(0) and servable(1)):
        from mcp.server.stdio import stdio_server

        async with stdio_server() as streams:
            yield streams
        return
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    saved_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    saved_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = trio.lowlevel.FdStream(wire_in)
    writer = trio.lowlevel.FdStream(wire_out)
    lines = LineWriter(writer)
    try:
        yield LineReader(reader), lines
    finally:
        lines.close_wire()
        with trio.CancelScope(shield=True):
            await reader.aclose()
            await writer.aclose()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
