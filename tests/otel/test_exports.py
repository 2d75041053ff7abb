"""The public surface of otel: everything in __all__ exists, nothing private leaks."""

from __future__ import annotations

import otel
from eventlog import SkillogError


def test_all_names_exist_and_are_public() -> None:
    for name in otel.__all__:
        assert hasattr(otel, name), name
        assert not name.startswith("_")
    public = {n for n in vars(otel) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(otel, n)).__name__ == "module"}
    assert public - modules == set(otel.__all__)


def test_errors_are_skillog_errors_with_exit_code_2() -> None:
    for error in (
        otel.OtelError,
        otel.BrokenChainError,
        otel.ExportFailedError,
        otel.SessionNotEndedError,
    ):
        assert issubclass(error, SkillogError) and error.exit_code == 2
