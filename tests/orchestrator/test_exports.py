"""The public surface: every name in __all__ exists, and nothing private leaks."""

import importlib

import pytest


@pytest.mark.parametrize(
    "package",
    [
        "eventlog",
        "orchestrator",
        "orchestrator.skills",
        "orchestrator.adapters",
        "orchestrator.service",
        "orchestrator.mcp",
        "orchestrator.mcp_server",
        "orchestrator.cli",
        "orchestrator.scripts",
        "orchestrator.runtime",
    ],
)
def test_all_names_exist_and_are_public(package: str) -> None:
    module = importlib.import_module(package)
    assert len(set(module.__all__)) == len(module.__all__), "duplicate names in __all__"
    for name in module.__all__:
        assert not name.startswith("_")
        assert getattr(module, name) is not None, name


def test_no_public_name_is_missing_from_all() -> None:
    import orchestrator

    public = {n for n in vars(orchestrator) if not n.startswith("_")}
    # subpackages and modules with surfaces of their own
    public -= {"skills", "adapters", "service", "mcp", "mcp_server", "cli", "scripts", "runtime"}
    assert public <= set(orchestrator.__all__) | {n for n in public if n.startswith("_")}
    missing = {n for n in public if n not in orchestrator.__all__ and not n[0].islower()}
    assert not missing, missing


def test_orchestrator_surface_for_embedding() -> None:
    import orchestrator

    for name in ("Agent", "HostTool", "PolicyConfig", "Session", "CODEC", "compose", "run_script"):
        assert name in orchestrator.__all__
