"""A throwaway PostgreSQL cluster for the tests and bench/postgres.py.

``initdb`` in a fresh temporary directory, a free TCP port on 127.0.0.1 and the unix
socket in the same directory, password authentication (scram) for the superuser. The
server refuses to run as root, so when we are root every server process runs as the
unprivileged ``nobody`` (through ``runuser``), which owns the directory.

Not a test module: tests/conftest.py wraps it in a session fixture, the bench imports it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

USER = "skillog"
PASSWORD = "s3cret-for-tests"
_RUN_AS = "nobody"


def find_bindir() -> str | None:
    """Where initdb/pg_ctl live: ``pg_config --bindir`` if it has them, else the newest
    /usr/lib/postgresql/*/bin (Debian), else None."""
    candidates: list[str] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(out.stdout.strip())
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True
    )
    for c in candidates:
        if os.access(os.path.join(c, "initdb"), os.X_OK):
            return c
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgCluster:
    """One server; :meth:`start` creates it, :meth:`stop` removes it."""

    def __init__(self, bindir: str, *, durable: bool = False) -> None:
        self.bindir = bindir
        # Tests skip the fsyncs (nothing here simulates power loss); the bench does not.
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="skillog-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_root = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", _RUN_AS, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        if self._as_root:
            shutil.chown(self.root, _RUN_AS)
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as_root:
            shutil.chown(pwfile, _RUN_AS)
        self._run(
            "initdb", "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile),
            "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        pwfile.unlink()
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": "200",
            "fsync": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "shared_buffers": "128MB",
        }
        with open(self.data / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in settings.items())
        self.up()

    def up(self) -> None:
        log = self.root / "server.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", "60", "start")

    def down(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def stop(self) -> None:
        """Stop the server and delete its directory, in a process of its own that goes on
        after ours: a database per test leaves hundreds of MiB in thousands of files, and
        waiting for their removal took 10-40 s at the end of every test run."""
        try:
            self.down("immediate")
        finally:
            remove = 'rm -rf -- "$1" >/dev/null 2>&1 </dev/null &'
            subprocess.run(["sh", "-c", remove, "sh", str(self.root)], start_new_session=True)

    def dsn(self, dbname: str = "postgres", *, password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{dbname}"

    def sql(self, sql: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run ``sql`` as the superuser (autocommit); the rows it returns, if any."""
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            cur = conn.execute(sql.encode())
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str) -> str:
        """A new empty database; returns its DSN."""
        self.sql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)
