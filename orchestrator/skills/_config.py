"""The persisted skills configuration: extra sources, filters, enable/disable, installs.

One YAML file (shape modelled on seed 003's ``config.yaml``), found at ``--config``,
else ``$SKILLOG_CONFIG``, else ``$XDG_CONFIG_HOME/skillog/config.yaml``, else
``~/.config/skillog/config.yaml``. A missing file is the default configuration. Writes
are atomic (temporary file + rename) so a crash never leaves half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import msgspec
import yaml

from ._errors import ConfigError
from ._model import Tier

MAX_CONFIG_BYTES = 1024 * 1024


class InstalledSkill(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Provenance of a skill ``skillog skills install`` put in the install directory."""

    name: str
    origin: str  # git URL, ZIP path or folder path as given
    kind: str  # "git" | "zip" | "folder"
    ref: str | None = None
    tier: Tier = Tier.THIRD_PARTY
    installed_at: int = 0  # ns since the epoch
    hash: str = ""


class SourceConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An extra directory to discover skills in, with its trust tier."""

    path: str
    tier: Tier = Tier.USER
    label: str | None = None


class SkillsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything ``skillog skills`` persists. Defaults are the documented behaviour."""

    dirs: tuple[SourceConfig, ...] = ()
    allow: tuple[str, ...] = ()  # name globs; empty means all
    deny: tuple[str, ...] = ()  # name globs
    disabled: tuple[str, ...] = ()  # names
    conventional: bool = True  # scan .agents/skills and .claude/skills (project and user)
    project_tier: Tier = Tier.USER
    lenient: bool = False
    install_dir: str | None = None
    requires_timeout_ms: int = 5000
    max_depth: int = 6
    max_dirs: int = 2000
    installed: tuple[InstalledSkill, ...] = ()


class _File(msgspec.Struct, frozen=True, kw_only=True):
    skills: SkillsConfig = msgspec.field(default_factory=SkillsConfig)


def config_path(env: Mapping[str, str] | None = None) -> str:
    """Where the configuration lives when ``--config`` is not given."""
    env = os.environ if env is None else env
    if env.get("SKILLOG_CONFIG"):
        return env["SKILLOG_CONFIG"]
    base = env.get("XDG_CONFIG_HOME") or os.path.join(_home(env), ".config")
    return os.path.join(base, "skillog", "config.yaml")


def default_install_dir(env: Mapping[str, str] | None = None) -> str:
    """Where installed skills go unless ``install_dir`` says otherwise."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or os.path.join(_home(env), ".local", "share")
    return os.path.join(base, "skillog", "skills")


def load_config(path: str) -> SkillsConfig:
    """Read the configuration at ``path``; a missing file gives the defaults."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return SkillsConfig()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the skills configuration ({e.strerror})") from e
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: the configuration is over {MAX_CONFIG_BYTES} bytes")
    try:
        raw = yaml.load(
            data, Loader=yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
        )
        return msgspec.convert(raw or {}, _File, str_keys=True).skills
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: the configuration is not valid YAML: {e}") from e
    except (msgspec.ValidationError, RecursionError) as e:
        raise ConfigError(f"{path}: {e} - see docs/skills.md for the format") from e


def save_config(path: str, config: SkillsConfig) -> None:
    """Write ``config`` to ``path`` atomically, creating its directory."""
    text = yaml.safe_dump(
        {"skills": msgspec.to_builtins(config)}, sort_keys=False, allow_unicode=True
    )
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".config-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the skills configuration ({e.strerror})") from e


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")
