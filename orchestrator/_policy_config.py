"""The policy a new session runs under, from the configuration file and the command line.

Layers, each over the one before (docs/policy.md)::

    defaults       PolicyConfig()
    config         the ``policy:`` section of the configuration file
    profile        ``policy.profiles.NAME``, chosen by --policy-profile or ``policy.profile``
    command line   --policy KEY=VALUE, in the order given

Mappings merge key by key (``tiers``, ``skills``, ``script_limits``...); any other
value replaces the one below. A key the format does not have is an error naming the
nearest valid one, wherever it is. The result is recorded whole in ``session.started``:
a session keeps the policy it started with, whatever the configuration says later.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import msgspec.inspect as mi
import yaml

from ._events import PolicyConfig, PolicyOverride
from ._policy import TIERS, parse_allowed_tools
from .scripts import LimitsOverride, check_limits
from .skills import ConfigError, load_policy_section, unknown_key

MAX_ELICITATION_MS = 24 * 3600 * 1000
"""The longest ``mcp.elicitation_timeout_ms``: a form holds its server's call and the
session's driver while it waits, so a day is already more a hang than a wait."""

PROFILE_KEYS = ("profile", "profiles")
"""Keys of the ``policy:`` section that choose a layer rather than set a value."""

_POLICY_INFO = mi.type_info(PolicyConfig)


def load_policy(
    config_file: str, *, profile: str | None = None, sets: Sequence[str] = ()
) -> PolicyConfig:
    """The effective policy: defaults, the file's ``policy:`` section, the profile
    (``profile``, else the section's own ``profile``), then ``sets`` (``KEY=VALUE``)."""
    section = load_policy_section(config_file)
    base = {k: v for k, v in section.items() if k not in PROFILE_KEYS}
    profiles = section.get("profiles") or {}
    if not isinstance(profiles, dict) or not all(
        isinstance(p, dict | None) for p in profiles.values()
    ):
        raise ConfigError(f"{config_file}: policy.profiles must map names to mappings")
    # Every profile is checked, the unused ones too: a typo should not wait for its day.
    for label, where, layer in [
        (config_file, "policy", base),
        *((config_file, f"policy.profiles.{n}", p or {}) for n, p in profiles.items()),
        *(("--policy", "policy", parse_set(text)) for text in sets),
    ]:
        problem = unknown_key(layer, _POLICY_INFO, where)
        if problem is not None:
            raise ConfigError(f"{label}: {problem} - see docs/policy.md")
    merged = base
    name = profile if profile is not None else section.get("profile")
    if name is not None:
        if name not in profiles:
            close = difflib.get_close_matches(str(name), list(profiles), n=1)
            known = ", ".join(map(str, profiles)) or "none"
            hint = f"did you mean '{close[0]}'?" if close else f"profiles: {known}"
            raise ConfigError(f"no policy profile {name!r} in {config_file}; {hint}")
        merged = merge(merged, profiles[name] or {})
    for text in sets:
        merged = merge(merged, parse_set(text))
    try:
        policy = msgspec.convert(enum_words(merged, _POLICY_INFO), PolicyConfig, str_keys=True)
    except msgspec.ValidationError as e:
        raise ConfigError(f"policy: {e} - see docs/policy.md") from e
    problem = check_policy(policy)
    if problem is not None:
        raise ConfigError(f"policy.{problem} - see docs/policy.md")
    return policy


def policy_profiles(config_file: str) -> list[str]:
    """The names of the file's policy profiles (``policy.profiles``), in file order."""
    profiles = load_policy_section(config_file).get("profiles") or {}
    return [str(name) for name in profiles] if isinstance(profiles, dict) else []


def parse_set(text: str) -> dict[str, Any]:
    """``script_limits.cpu_s=120`` as ``{"script_limits": {"cpu_s": 120}}``: a dotted
    key, ``=``, and a YAML value (``true``, ``[user, org]``, ``null``, a string)."""
    key, eq, value = text.partition("=")
    parts = key.strip().split(".")
    if not eq or not all(parts):
        raise ConfigError(
            f"--policy {text!r}: expected KEY=VALUE, e.g. script_timeout_ms=60000 or "
            "skills.pdf.network=true"
        )
    try:
        data: Any = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"--policy {text!r}: the value is not YAML ({e}); quote it") from e
    for part in reversed(parts):
        data = {part: data}
    result: dict[str, Any] = data
    return result


def enum_words(value: Any, info: mi.Type) -> Any:
    """``value`` with the yes/no words people write read as the enum's own word.

    YAML 1.1 reads ``off``, ``no``, ``on``, ``yes`` (and ``true``/``false``) as booleans,
    so ``sandbox: off`` would be ``False`` where a string enum is expected. Wherever the
    type ``info`` expects a string enum, such a boolean (or one of those words in any
    case) becomes the enum's member that means it: the first of off/no/false/never for
    false, of on/yes/true/required/always for true (``sandbox: on`` is ``required``).
    Anything else is left for ``msgspec.convert`` to judge.
    """
    if isinstance(info, mi.UnionType):
        for member in info.types:
            value = enum_words(value, member)
        return value
    if isinstance(info, mi.LiteralType):
        return _enum_word(value, info.values)
    if isinstance(info, mi.StructType) and isinstance(value, Mapping):
        fields = {f.encode_name: f.type for f in info.fields}
        return {k: enum_words(v, fields[k]) if k in fields else v for k, v in value.items()}
    if isinstance(info, mi.DictType) and isinstance(value, Mapping):
        return {k: enum_words(v, info.value_type) for k, v in value.items()}
    return value


_TRUTH = {"on": True, "yes": True, "true": True, "off": False, "no": False, "false": False}
_WORDS = {False: ("off", "no", "false", "never"), True: ("on", "yes", "true", "required", "always")}


def _enum_word(value: Any, members: tuple[Any, ...]) -> Any:
    if isinstance(value, bool):
        truth = value
    elif isinstance(value, str) and value not in members and value.lower() in _TRUTH:
        truth = _TRUTH[value.lower()]
    else:
        return value
    return next((word for word in _WORDS[truth] if word in members), value)


def merge(below: Mapping[str, Any], above: Mapping[str, Any]) -> dict[str, Any]:
    """``above`` over ``below``: mappings merge key by key, anything else replaces."""
    out = dict(below)
    for key, value in above.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def check_policy(policy: PolicyConfig) -> str | None:
    """What is wrong with a policy the format accepts (pure): an unknown tier, a rule
    that is not one ``allowed-tools`` rule, a limit out of range."""
    for field in ("approve", "network", "preapprove_tiers"):
        for tier in getattr(policy, field):
            if tier not in TIERS:
                return _unknown_tier(f"{field}", tier)
    for tier in policy.tiers:
        if tier not in TIERS:
            return _unknown_tier("tiers", tier)
    overrides = [
        (f"{kind}.{name}", override)
        for kind in ("tiers", "sources", "skills")
        for name, override in getattr(policy, kind).items()
    ]
    for where, allow in [("allow", policy.allow)] + [
        (f"{w}.allow", o.allow) for w, o in overrides if o.allow is not msgspec.UNSET
    ]:
        for rule in allow:  # type: ignore[union-attr]
            if len(parse_allowed_tools(rule)) != 1:
                return f"{where}: {rule!r} is not one allowed-tools rule (Name or Name(pattern))"
    limits = [("script_limits", policy.script_limits)]
    for where, override in overrides:
        if isinstance(patch := override.script_limits, LimitsOverride):
            changed = {k: v for k in patch.__struct_fields__
                       if (v := getattr(patch, k)) is not msgspec.UNSET}  # fmt: skip
            limits.append(
                (f"{where}.script_limits", msgspec.structs.replace(policy.script_limits, **changed))
            )
    for where, merged_limits in limits:
        problem = check_limits(merged_limits)
        if problem is not None:
            return f"{where}: {problem}"
    for where, value in _positive_ints(policy, overrides):
        if value < 1:
            return f"{where} must be at least 1 (it is {value})"
    waits = policy.mcp.elicitation_timeout_ms
    if not 1 <= waits <= MAX_ELICITATION_MS:
        return (
            f"mcp.elicitation_timeout_ms must be from 1 to {MAX_ELICITATION_MS} ms (a day; "
            f"it is {waits}): how long a server's form waits for a human, holding its call"
        )
    samples = policy.mcp.max_samples_per_call
    if samples < 0:
        return (
            f"mcp.max_samples_per_call must be 0 or more (it is {samples}): the sampling "
            "requests a server may make during one call; 0 refuses every one"
        )
    return None


def _positive_ints(
    policy: PolicyConfig, overrides: list[tuple[str, PolicyOverride]]
) -> list[tuple[str, int]]:
    keys = ("script_timeout_ms", "output_cap_bytes", "read_max_bytes")
    found = [(k, getattr(policy, k)) for k in keys]
    found += [(f"{w}.{k}", v) for w, o in overrides for k in keys
              if (v := getattr(o, k)) is not msgspec.UNSET]  # fmt: skip
    if policy.approval_timeout_ms is not None:
        found.append(("approval_timeout_ms", policy.approval_timeout_ms))
    return found


def _unknown_tier(where: str, tier: str) -> str:
    close = difflib.get_close_matches(tier, TIERS, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"tiers: {', '.join(TIERS)}"
    return f"{where}: unknown tier {tier!r}; {hint}"
