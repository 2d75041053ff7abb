"""An OSError that no layer wrapped still reaches the user as one line with exit 2,
even from inside a trio nursery's exception group."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

SKILLOG = str(Path(sys.executable).parent / "skillog")


def test_serve_on_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        host, port = taken.getsockname()
        run = subprocess.run(
            [SKILLOG, "serve", "--db", str(tmp_path / "x.db"), "--bind", f"{host}:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr == (
        "skillog serve: error: address already in use: stop what listens there or choose another\n"
    )
