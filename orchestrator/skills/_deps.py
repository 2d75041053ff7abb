"""A skill's dependencies (``metadata.requires``) and its own Python environment.

``metadata.requires`` is a string of space-separated tokens (seed 000 D2-D3):

- ``pdftotext``: a bare command that must be on PATH;
- ``python:<PEP 508 requirement>`` (``python:humanize>=4``): a package its scripts
  import, installed into the skill's own environment;
- ``python-version:<specifier>`` (``python-version:>=3.10``): the interpreter scripts
  run with;
- ``mcp:<server>``: a configured MCP server the skill needs.

A skill's environment is a virtual environment (``python -m venv``, no pip inside)
keyed by the sha256 of its requirements, the interpreter's version and the platform,
under ``$XDG_DATA_HOME/skillog/envs/<key>``, built by pip (``pip --python``) in a
temporary directory and renamed into place when complete, so a failed or interrupted
build leaves nothing half-built. ``<key>.json`` next to it records the requirements,
the exact versions installed (the lock, ``pip freeze``) and the tree hash of every
file; a script runs only in an environment whose files still hash to it (a changed
environment is refused like a changed skill). Scripts run with the environment's
interpreter, bound read-only at ``/skill-env`` in the sandbox.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Literal

import msgspec
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ._errors import SkillError

Kind = Literal["command", "python", "python-version", "mcp"]


class DependencyError(SkillError):
    """A requirement that cannot be parsed, or an environment that cannot be built."""


class Need(msgspec.Struct, frozen=True, kw_only=True):
    """One token of ``metadata.requires``."""

    kind: Kind
    spec: str  # the command, the PEP 508 requirement, the specifier or the server


class EnvRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What ``<key>.json`` says of a built environment."""

    key: str
    requirements: tuple[str, ...]
    interpreter: str
    platform: str
    lock: tuple[str, ...]  # name==version, sorted
    tree_hash: str


def parse_requires(text: str) -> list[Need]:
    """The tokens of ``metadata.requires``; :class:`DependencyError` names a bad one."""
    needs: list[Need] = []
    for token in text.split():
        kind, sep, spec = token.partition(":")
        if not sep:
            if (
                not token.replace(".", "")
                .replace("_", "")
                .replace("+", "")
                .replace("-", "")
                .isalnum()
            ):
                raise DependencyError(
                    f"metadata.requires: {token!r} is not a command name; give bare command names, "
                    "python:<requirement>, python-version:<specifier> or mcp:<server>"
                )
            needs.append(Need(kind="command", spec=token))
        elif kind == "python":
            try:
                Requirement(spec)
            except InvalidRequirement as e:
                raise DependencyError(
                    f"metadata.requires: {token!r} is not a PEP 508 requirement ({e})"
                ) from None
            needs.append(Need(kind="python", spec=spec))
        elif kind == "python-version":
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                raise DependencyError(
                    f"metadata.requires: {token!r} is not a version specifier (>=3.10)"
                ) from None
            needs.append(Need(kind="python-version", spec=spec))
        elif kind == "mcp" and spec:
            needs.append(Need(kind="mcp", spec=spec))
        else:
            raise DependencyError(
                f"metadata.requires: {token!r} has an unknown kind {kind!r}; use python:, "
                "python-version: or mcp:"
            )
    return needs


def python_requirements(metadata: dict[str, str]) -> tuple[str, ...]:
    """The ``python:`` requirements, normalised and sorted (what the key hashes)."""
    try:
        needs = parse_requires(metadata.get("requires", ""))
    except DependencyError:
        return ()
    return tuple(sorted(str(Requirement(n.spec)) for n in needs if n.kind == "python"))


def interpreter_version() -> str:
    return platform.python_version()


def env_key(requirements: Sequence[str]) -> str:
    """sha256 of (requirements, interpreter, platform): the environment's name."""
    canonical = msgspec.json.encode(
        {
            "requirements": sorted(requirements),
            "interpreter": f"{sys.implementation.name}-{interpreter_version()}",
            "platform": f"{sys.platform}-{platform.machine()}",
        },
        order="sorted",
    )
    return hashlib.sha256(canonical).hexdigest()


def envs_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(base) / "skillog" / "envs"


def tree_hash(root: Path) -> str:
    """sha256 over every entry below ``root``: path, kind, mode bit and content (a
    symlink's target text), sorted by path bytes."""
    entries: list[tuple[bytes, bytes]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [
            *filenames,
            *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))),
        ]:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).encode()
            if os.path.islink(path):
                entries.append((rel, b"L" + os.readlink(path).encode()))
                continue
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest().encode()
            x = b"x" if os.access(path, os.X_OK) else b"-"
            entries.append((rel, b"F" + x + digest))
    h = hashlib.sha256()
    for rel, what in sorted(entries):
        h.update(rel + b"\0" + what + b"\n")
    return h.hexdigest()


class EnvState(msgspec.Struct, frozen=True, kw_only=True):
    """A skill's environment as it stands: its key and path, and the record when built."""

    key: str
    path: str
    record: EnvRecord | None = None


def env_state(requirements: Sequence[str], root: Path | None = None) -> EnvState:
    """Where the environment for ``requirements`` is, and its record if it is built."""
    key = env_key(requirements)
    base = root or envs_dir()
    meta = base / f"{key}.json"
    record = None
    if meta.is_file() and (base / key).is_dir():
        try:
            record = msgspec.json.decode(meta.read_bytes(), type=EnvRecord)
        except msgspec.DecodeError:
            record = None
    return EnvState(key=key, path=str(base / key), record=record)


def check_env(state: EnvState) -> str | None:
    """Why the built environment must not be used (its files changed), or None."""
    if state.record is None:
        return f"environment {state.key[:12]} is not built"
    now = tree_hash(Path(state.path))
    if now != state.record.tree_hash:
        return (
            f"environment {state.key[:12]} changed since it was built (sha256:"
            f"{state.record.tree_hash[:12]} is now sha256:{now[:12]}); rebuild it with "
            "skillog skills deps NAME --install"
        )
    return None


def build_env(
    requirements: Sequence[str], *, root: Path | None = None, timeout_s: float = 600
) -> EnvRecord:
    """Build the environment for ``requirements`` (network for pip only), atomically:
    in a temporary directory renamed into place once complete. Idempotent."""
    state = env_state(requirements, root)
    if state.record is not None and check_env(state) is None:
        return state.record
    base = Path(state.path).parent
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{state.key[:12]}-", dir=base))
    try:
        _run(
            [sys.executable, "-m", "venv", "--without-pip", str(tmp)], "create the venv", timeout_s
        )
        python = str(tmp / "bin" / "python")
        pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
        _run([*pip, "install", "--no-input", "--only-binary=:all:", *requirements],
             "install the requirements", timeout_s)  # fmt: skip
        frozen = _run([*pip, "freeze", "--all"], "list what was installed", timeout_s)
        lock = tuple(sorted(line for line in frozen.splitlines() if "==" in line))
        record = EnvRecord(
            key=state.key,
            requirements=tuple(sorted(requirements)),
            interpreter=f"{sys.implementation.name}-{interpreter_version()}",
            platform=f"{sys.platform}-{platform.machine()}",
            lock=lock,
            tree_hash=tree_hash(tmp),
        )
        final = Path(state.path)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        # The venv's paths are relative to where it is now: its record is written last.
        meta_tmp = base / f".{state.key}.json.tmp"
        meta_tmp.write_bytes(msgspec.json.encode(record))
        os.replace(meta_tmp, base / f"{state.key}.json")
        return record
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _run(argv: list[str], what: str, timeout_s: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DependencyError(f"cannot {what}: {e}; nothing was installed") from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DependencyError(
            f"cannot {what} (pip exit {done.returncode}): {' / '.join(tail)}; nothing was "
            "installed (check the network and the requirement)"
        )
    return done.stdout


def missing_needs(
    needs: Sequence[Need],
    *,
    name: str,
    mcp_servers: Collection[str] | None,
    lazy_install: bool = False,
) -> list[str]:
    """The ``python:``, ``python-version:`` and ``mcp:`` needs not met, as the catalog
    says them (commands are the command checker's). With ``lazy_install``
    (``policy.lazy_install: ask``) a missing or changed environment is not one: the
    first ``run_script`` asks to build it."""
    out: list[str] = []
    python = tuple(sorted(str(Requirement(n.spec)) for n in needs if n.kind == "python"))
    for n in needs:
        if n.kind == "python-version" and interpreter_version() not in SpecifierSet(n.spec):
            out.append(f"python-version:{n.spec} (this is Python {interpreter_version()})")
        elif n.kind == "mcp" and (mcp_servers is None or n.spec not in mcp_servers):
            out.append(f"mcp:{n.spec} (no MCP server named {n.spec!r} is configured)")
    if python and not lazy_install:
        state = env_state(python)
        problem = check_env(state) if state.record is not None else None
        if state.record is None:
            wanted = " ".join(f"python:{r}" for r in python)
            out.append(f"{wanted} (not installed; skillog skills deps {name} --install)")
        elif problem is not None:
            out.append(problem)
    return out
