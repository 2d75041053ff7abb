"""``skillog`` run with a real pty as its terminal, for the tests of what is asked
there (approvals, MCP forms) and answered from other processes meanwhile."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

SKILLOG = str(Path(sys.executable).with_name("skillog"))


class Pty:
    """``skillog run`` with a pty as its terminal (stdin, stdout, stderr)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.primary, secondary = pty.openpty()
        self.proc = subprocess.Popen(
            [SKILLOG, *args], stdin=secondary, stdout=secondary, stderr=secondary,
            cwd=cwd, env=env, start_new_session=True,
        )  # fmt: skip
        os.close(secondary)
        self.seen = b""

    def expect(self, text: bytes, after: int = 0) -> int:
        """Read until ``text`` shows after position ``after``; where it ends."""
        deadline = time.monotonic() + 60
        while (at := self.seen.find(text, after)) < 0:
            # A process that ended may have written its last lines just before: they
            # are read first (a loaded machine runs it to its end between two reads).
            ended = self.proc.poll() is not None
            if select.select([self.primary], [], [], 0 if ended else 0.5)[0]:
                try:
                    chunk = os.read(self.primary, 4096)
                except OSError:  # EIO: the terminal's last writer is gone
                    chunk = b""
                if chunk:
                    self.seen += chunk
                    continue
            assert not ended and time.monotonic() < deadline, self.seen
        return at + len(text)

    def send(self, line: str) -> None:
        os.write(self.primary, line.encode() + b"\n")

    def finish(self) -> int:
        deadline = time.monotonic() + 60
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, self.seen
            if select.select([self.primary], [], [], 0.2)[0]:
                try:
                    self.seen += os.read(self.primary, 4096)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
        code = self.proc.wait(timeout=60)
        os.close(self.primary)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
