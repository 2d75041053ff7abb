"""Fixtures for every package's tests: a throwaway PostgreSQL server (tests/pgcluster.py).

Without PostgreSQL binaries the tests that need the server are skipped with one line
saying why; under CI (``CI=true``) they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _load_helper(name: str):  # type: ignore[no-untyped-def]
    """tests/NAME.py as the module named by its file, so test modules can import it. By path:
    putting tests/ on sys.path would shadow the eventlog package with the tests/eventlog
    folder (a namespace package)."""
    path = Path(__file__).parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


pgcluster = _load_helper("pgcluster")
_load_helper("chromium")  # Debian's Chromium for the browser tests (service, replay)
_load_helper("standin")  # a provider's HTTP API on loopback (adapters, service)
_load_helper("gated")  # skill scripts that run until a test lets them end
_load_helper("terminal")  # skillog on a real pty (approvals and forms asked there)
crashpoints = _load_helper("orchestrator/crashpoints")  # the crash-point suite's sessions
PgCluster = pgcluster.PgCluster
_names = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One server for the whole session, stopped and deleted at the end."""
    bindir = pgcluster.find_bindir()
    if bindir is None:
        reason = "PostgreSQL server binaries (initdb) not found; apt-get install postgresql"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
        pytest.skip(reason)
    cluster = PgCluster(bindir)
    try:
        cluster.start()
    except Exception as e:
        cluster.stop()
        pytest.fail(f"could not start a throwaway PostgreSQL server: {e}")
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_database(pg_cluster: PgCluster) -> Callable[[], str]:
    """Creates a fresh, empty database per call; returns its DSN (with the password)."""

    def create() -> str:
        return pg_cluster.create_database(f"t{os.getpid()}_{next(_names)}")

    return create


@pytest.fixture
def pg_dsn(pg_database: Callable[[], str]) -> str:
    """A fresh, empty database for this test."""
    return pg_database()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The crash-point suite's counts (tests/orchestrator/test_crash_points.py), summed
    over its parts from their reports, which also come back from pytest -n's workers."""
    total: collections.Counter[str] = collections.Counter()
    reports = terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
    for report in reports:
        for name, counts in getattr(report, "user_properties", ()):
            if name == "crash_points":
                total.update(counts)
    if total:
        terminalreporter.write_line(crashpoints.Tally(**total).line())
