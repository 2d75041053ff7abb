"""The import-linter contract in pyproject.toml names the orchestrator core module by
module (a layer cannot hold a package and its subpackages); a module added to the core
must be added to its layer, or the contract would not see it."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EDGES = {"cli", "mcp_server", "service"}


def _core_layer() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    (core,) = [layer for layer in layers if "orchestrator._" in layer]
    return {name.strip() for name in core.split(":")}


def test_the_core_layer_names_every_module_of_the_core() -> None:
    package = ROOT / "orchestrator"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    subpackages = {p.parent.name for p in package.glob("*/__init__.py")}
    core = {f"orchestrator.{name}" for name in modules | (subpackages - EDGES)}
    assert _core_layer() == core
    assert subpackages >= EDGES  # the edges the layers contract names exist


def test_the_contracts_hold() -> None:
    """What .ci/test runs after mypy: 0 imports run back up the layers."""
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
