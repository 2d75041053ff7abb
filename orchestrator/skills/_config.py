"""The persisted skills configuration: extra sources, filters, enable/disable, installs.

One YAML file (shape modelled on seed 003's ``config.yaml``), found at ``--config``,
else ``$SKILLOG_CONFIG``, else ``$XDG_CONFIG_HOME/skillog/config.yaml``, else
``~/.config/skillog/config.yaml``. A missing file is the default configuration; a key
the format does not have is an error naming the nearest valid one. Writes change only
the keys whose value changed, in place, so the user's comments, order and quoting stay
(``_config_edit``), and are atomic (temporary file + rename): a crash never leaves half
a file.
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
import msgspec.inspect as mi
import yaml

from eventlog import os_error_message, write_file

from ._config_edit import set_skills_keys
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
    follow_external_symlinks: bool = False  # follow symlinked folders leaving a source
    compact_catalog_over: int = 50  # the model's catalog is one line per skill above this
    # full | compact | names | search; unset: full, compact over compact_catalog_over
    catalog_mode: Literal["full", "compact", "names", "search"] | None = None
    watch: bool = False  # rescan the sources between turns (stat-based)
    trusted_signers: str | None = None  # a public key file or trusted-keys file
    # trust: builtin > org > project > config > user > installed (seed 000, the default);
    # plugin: installed > project > config > user > org > builtin (seed 003 PRI)
    precedence: Literal["trust", "plugin"] = "trust"
    installed: tuple[InstalledSkill, ...] = ()


class LogConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``log:`` section: what ``skillog log verify`` and ``replay`` trust."""

    # A public key file or trusted-keys file: the default of --key with --checkpoint.
    trusted_keys: str | None = None


Role = Literal["viewer", "approver", "submitter", "admin"]


class ServiceToken(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A bearer token of ``skillog serve``: only the sha256 of the token is stored."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[\w.@-]+$")]
    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    roles: tuple[Role, ...] = ("viewer",)


class ServiceConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``service:`` section: who may call ``skillog serve`` (docs/service.md)."""

    tokens: tuple[ServiceToken, ...] = ()


McpServerName = Annotated[
    str, msgspec.Meta(max_length=32, pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*(?:_[A-Za-z0-9-]+)*$")
]
"""Letters, digits, ``-`` and single ``_`` (``__`` separates the parts of
``mcp__<server>__<tool>``)."""

McpEffect = Literal["pure", "idempotent", "at-most-once"]
PositiveMs = Annotated[int, msgspec.Meta(gt=0)]


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One MCP server a session uses (docs/mcp.md): a subprocess over stdio
    (``command`` with ``args``, ``env``, ``cwd``) or a streamable HTTP endpoint (``url``
    with ``headers``), never both. Connecting (start, ``initialize``, the tool list)
    must finish within ``connect_timeout_ms``, each call within ``call_timeout_ms``.
    ``effects`` overrides the effect class the tools' annotations suggest, by the
    server's tool name or ``"*"`` for all its tools (servers can be wrong about
    themselves). In the configuration file the name is the key under
    ``mcp.servers``."""

    name: McpServerName = ""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    connect_timeout_ms: PositiveMs = 10_000
    call_timeout_ms: PositiveMs = 60_000
    effects: dict[str, McpEffect] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r} needs exactly one of command (stdio) or url "
                "(streamable HTTP)"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: url must start with http:// or https://")

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


class McpConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``mcp:`` section: the MCP servers every session of ``skillog run`` uses."""

    servers: dict[McpServerName, McpServerConfig] = msgspec.field(default_factory=dict)


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``model:`` section: what the sessions started know of their model
    (docs/context.md). ``context_window`` in tokens (unset: the window of a known model;
    ``--context-window`` overrides it); ``tokenizer`` how tokens are estimated for the
    context budget: ``bytes`` (a quarter of the bytes), ``tiktoken`` or ``auto``
    (tiktoken where it loads, else bytes); ``instructions`` where the active skills'
    instructions go: ``system`` (the system prompt) or ``results`` (the ``skills.load``
    results only, the system prompt left alone: cache-friendlier when skills change)."""

    context_window: Annotated[int, msgspec.Meta(gt=0)] | None = None
    tokenizer: Literal["bytes", "tiktoken", "auto"] = "bytes"
    instructions: Literal["system", "results"] = "system"


class _File(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    skills: SkillsConfig = msgspec.field(default_factory=SkillsConfig)
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    service: ServiceConfig = msgspec.field(default_factory=ServiceConfig)
    # The runtime's policy (docs/policy.md): checked and layered by the runtime
    # (orchestrator._policy_config), which owns its format; kept as YAML data here.
    policy: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp: McpConfig = msgspec.field(default_factory=McpConfig)
    model: ModelConfig = msgspec.field(default_factory=ModelConfig)


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
    text = _read(path)
    return SkillsConfig() if text is None else _parsed(path, text).skills


def load_log_config(path: str) -> LogConfig:
    """The ``log:`` section of the configuration at ``path`` (defaults if missing)."""
    text = _read(path)
    return LogConfig() if text is None else _parsed(path, text).log


def load_service_config(path: str) -> ServiceConfig:
    """The ``service:`` section of the configuration at ``path`` (defaults if missing)."""
    text = _read(path)
    return ServiceConfig() if text is None else _parsed(path, text).service


def load_model_config(path: str) -> ModelConfig:
    """The ``model:`` section of the configuration at ``path`` (defaults if missing)."""
    text = _read(path)
    return ModelConfig() if text is None else _parsed(path, text).model


def load_policy_section(path: str) -> dict[str, Any]:
    """The ``policy:`` section of the configuration at ``path`` as YAML data (nulls
    kept: in a policy, null means "no limit"); empty if missing."""
    text = _read(path)
    return {} if text is None else copy.deepcopy(_parsed(path, text).policy)


def load_mcp_servers(path: str) -> tuple[McpServerConfig, ...]:
    """The MCP servers of the configuration at ``path`` (none if it is missing), each
    named by its key, in name order."""
    text = _read(path)
    servers = McpConfig() if text is None else _parsed(path, text).mcp
    out = []
    for key in sorted(servers.servers):
        server = servers.servers[key]
        if server.name not in ("", key):
            raise ConfigError(
                f"{path}: mcp.servers.{key}.name is {server.name!r}; the key names the server, "
                "leave name out"
            )
        out.append(msgspec.structs.replace(server, name=key))
    return tuple(out)


def add_service_token(path: str, token: ServiceToken) -> None:
    """Add ``token`` to the ``service:`` section of ``path`` atomically (creating the
    file). A file without that section gets it appended, the rest kept byte for byte;
    one that has it is written afresh (its comments are not kept)."""
    text = _read(path) or ""
    if "service" not in (yaml.safe_load(text) or {}):
        entry = msgspec.to_builtins(token)
        section = yaml.safe_dump({"service": {"tokens": [entry]}}, sort_keys=False)
        edited = (text + ("\n" if text and not text.endswith("\n") else "")) + section
        _write_atomic(path, edited, "service configuration")
        return
    tokens = _parsed(path, text).service.tokens
    _set_service_tokens(path, text, (*tokens, token))


def remove_service_tokens(path: str, name: str) -> int:
    """Remove the tokens named ``name`` from ``path`` atomically; how many there were
    (the file is not written when none is)."""
    text = _read(path) or ""
    tokens = _parsed(path, text).service.tokens if text else ()
    kept = tuple(t for t in tokens if t.name != name)
    if len(kept) < len(tokens):
        _set_service_tokens(path, text, kept)
    return len(tokens) - len(kept)


def _set_service_tokens(path: str, text: str, tokens: tuple[ServiceToken, ...]) -> None:
    # The section exists: the file is written afresh (its comments are not kept).
    merged = msgspec.structs.replace(_parsed(path, text), service=ServiceConfig(tokens=tokens))
    doc = {k: v for k, v in msgspec.json.decode(msgspec.json.encode(merged)).items()
           if getattr(merged, k) != getattr(_File(), k)}  # fmt: skip
    edited = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    _write_atomic(path, edited, "service configuration")


def save_config(path: str, config: SkillsConfig) -> None:
    """Write ``config`` to ``path`` atomically, creating its directory.

    Only the keys whose value differs from the file's are rewritten, where they are;
    the rest of the file is kept byte for byte. Should the edited text not read back as
    ``config`` (a layout the editor does not handle), the section is written afresh.
    """
    text = _read(path) or ""
    parsed = _parsed(path, text) if text else _File()
    old = _plain(parsed.skills)
    new = _plain(config)
    edited = set_skills_keys(text, {k: v for k, v in new.items() if old.get(k) != v})
    try:
        ok = _parse(path, edited) == msgspec.structs.replace(parsed, skills=config)
    except ConfigError:
        ok = False
    if not ok:  # a safety net: the data matters more than the comments
        doc: dict[str, object] = {"skills": new}
        if parsed.log != LogConfig():
            doc["log"] = msgspec.to_builtins(parsed.log)
        if parsed.service != ServiceConfig():
            doc["service"] = msgspec.to_builtins(parsed.service)
        if parsed.policy:
            doc["policy"] = parsed.policy
        if parsed.mcp != McpConfig():
            doc["mcp"] = msgspec.to_builtins(parsed.mcp)
        edited = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    _write_atomic(path, edited, "skills configuration")


def _write_atomic(path: str, text: str, what: str) -> None:
    # 0600: the file holds service token hashes; a new directory is created first.
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the {what}: {os_error_message(e)}") from e
    write_file(path, text.encode(), what=what, mode=0o600)


def _plain(config: SkillsConfig) -> dict[str, object]:
    """The configuration as YAML-ready data (lists, not tuples)."""
    data: dict[str, object] = msgspec.json.decode(msgspec.json.encode(config))
    return data


def _drop_nulls(raw: object) -> object:
    """YAML null (``key:``, ``~``, ``null``) is "no value": the key takes its default."""
    if isinstance(raw, dict):
        return {k: _drop_nulls(v) for k, v in raw.items() if v is not None}
    if isinstance(raw, list):
        return [_drop_nulls(v) for v in raw]
    return raw


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the skills configuration ({e.strerror})") from e
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: the configuration is over {MAX_CONFIG_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: the configuration is not UTF-8 (byte {e.start})") from e


@functools.cache
def _file_info() -> mi.Type:
    """The format's type tree, built once: ``mi.type_info`` evaluates every annotation
    again on each call (~1.2 ms of a 1.3 ms configuration read; an agent reads the
    configuration three times, and ``serve`` builds one per submission and one per
    session its worker takes: 17% of its event loop under bench/service.py)."""
    return mi.type_info(_File)


@functools.lru_cache(maxsize=16)
def _parsed(path: str, text: str) -> _File:
    """:func:`_parse`, once per text: a long-running process (``serve``, a worker) reads
    the configuration for every agent it builds, three sections each. The file is still
    read every time, so a change is seen at once; its text is the key, so an unchanged
    file is not parsed again (0.2 ms of YAML and conversion per read; the results are
    frozen structs, shared)."""
    return _parse(path, text)


def _parse(path: str, text: str) -> _File:
    try:
        raw = yaml.load(
            text, Loader=yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
        )
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: the configuration is not valid YAML: {e}") from e
    unknown = unknown_key(raw, _file_info(), "")
    if unknown is not None:
        raise ConfigError(f"{path}: {unknown} - see docs/skills.md for the format")
    if isinstance(raw, dict) and raw.get("policy") is not None:
        policy = raw["policy"]
        if not isinstance(policy, dict):
            raise ConfigError(f"{path}: policy must be a mapping - see docs/policy.md")
        raw = {**raw, "policy": None}
    else:
        policy = {}
    try:
        parsed = msgspec.convert(_drop_nulls(raw) or {}, _File, str_keys=True)
    except (msgspec.ValidationError, RecursionError) as e:
        raise ConfigError(f"{path}: {e} - see docs/skills.md for the format") from e
    return msgspec.structs.replace(parsed, policy={str(k): v for k, v in policy.items()})


def unknown_key(raw: object, info: mi.Type, where: str) -> str | None:
    """The first key of ``raw`` the format ``info`` has no place for, with the nearest
    valid key (``where`` is the path of ``raw``, for the message)."""
    if isinstance(info, mi.UnionType):
        structured = [t for t in info.types if isinstance(t, mi.StructType | mi.DictType)]
        return unknown_key(raw, structured[0], where) if len(structured) == 1 else None
    if isinstance(info, mi.DictType) and isinstance(raw, dict):
        for key, value in raw.items():
            found = unknown_key(value, info.value_type, f"{where}.{key}")
            if found is not None:
                return found
    elif isinstance(info, mi.StructType) and isinstance(raw, dict):
        fields = {f.encode_name: f.type for f in info.fields}
        for key, value in raw.items():
            at = f"{where}.{key}" if where else str(key)
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                valid = f"valid: {', '.join(fields)}" if fields else "this section has no keys yet"
                hint = f"did you mean '{close[0]}'?" if close else valid
                return f"unknown key '{at}'; {hint}"
            found = unknown_key(value, fields[key], at)
            if found is not None:
                return found
    elif isinstance(info, mi.VarTupleType) and isinstance(raw, list):
        for i, item in enumerate(raw):
            found = unknown_key(item, info.item_type, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def trusted_keys_default(env: Mapping[str, str] | None = None) -> str | None:
    """What ``--key`` defaults to for checkpoints: ``$SKILLOG_TRUSTED_KEYS``, else
    ``log.trusted_keys`` in the configuration file (relative to that file)."""
    env = os.environ if env is None else env
    if env.get("SKILLOG_TRUSTED_KEYS"):
        return env["SKILLOG_TRUSTED_KEYS"]
    path = config_path(env)
    keys = load_log_config(path).trusted_keys
    if keys is None:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(keys))


def trusted_signers(config: SkillsConfig, cfg_file: str) -> frozenset[str]:
    """The keys of ``skills.trusted_signers`` (a path relative to the configuration
    file): a public key file or a trusted-keys file, as for checkpoints."""
    if config.trusted_signers is None:
        return frozenset()
    from eventlog import load_trusted_keys  # the log's key tooling, imported when used

    path = os.path.join(
        os.path.dirname(os.path.abspath(cfg_file)), os.path.expanduser(config.trusted_signers)
    )
    return load_trusted_keys(path)


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")
