"""Skills as packages on disk or in code: parse, validate, hash, discover, index, install.

Everything about a skill before a model sees it. See ``docs/skills.md`` (discovery,
precedence, configuration, install) and ``docs/skill-hash.md`` (the hash definition).
"""

from ._catalog import Catalog as Catalog
from ._catalog import CatalogEntry as CatalogEntry
from ._catalog import CatalogRecord as CatalogRecord
from ._catalog import Provenance as Provenance
from ._catalog import Rejected as Rejected
from ._catalog import Shadowed as Shadowed
from ._catalog import Status as Status
from ._catalog import build_catalog as build_catalog
from ._catalog import build_catalog_async as build_catalog_async
from ._catalog import filter_reason as filter_reason
from ._config import InstalledSkill as InstalledSkill
from ._config import McpServerConfig as McpServerConfig
from ._config import ModelConfig as ModelConfig
from ._config import Role as Role
from ._config import ServiceConfig as ServiceConfig
from ._config import ServiceToken as ServiceToken
from ._config import SkillsConfig as SkillsConfig
from ._config import SourceConfig as SourceConfig
from ._config import add_service_token as add_service_token
from ._config import config_path as config_path
from ._config import load_config as load_config
from ._config import load_mcp_servers as load_mcp_servers
from ._config import load_model_config as load_model_config
from ._config import load_policy_section as load_policy_section
from ._config import load_service_config as load_service_config
from ._config import remove_service_tokens as remove_service_tokens
from ._config import save_config as save_config
from ._config import trusted_keys_default as trusted_keys_default
from ._config import trusted_signers as trusted_signers
from ._config import unknown_key as unknown_key
from ._deps import DependencyError as DependencyError
from ._deps import EnvRecord as EnvRecord
from ._deps import EnvState as EnvState
from ._deps import Need as Need
from ._deps import build_env as build_env
from ._deps import check_env as check_env
from ._deps import env_state as env_state
from ._deps import parse_requires as parse_requires
from ._deps import python_requirements as python_requirements
from ._discover import SkillSource as SkillSource
from ._discover import default_sources as default_sources
from ._discover import find_skill_dirs as find_skill_dirs
from ._discover import install_dir as install_dir
from ._discover import split_skill_dirs as split_skill_dirs
from ._errors import ConfigError as ConfigError
from ._errors import DuplicateSkillError as DuplicateSkillError
from ._errors import InstallError as InstallError
from ._errors import ManifestError as ManifestError
from ._errors import Problem as Problem
from ._errors import SkillChangedError as SkillChangedError
from ._errors import SkillError as SkillError
from ._errors import SkillIndexError as SkillIndexError
from ._errors import SkillNotFoundError as SkillNotFoundError
from ._errors import SkillTreeError as SkillTreeError
from ._errors import SkillValidationError as SkillValidationError
from ._hash import hash_manifest as hash_manifest
from ._hash import make_manifest as make_manifest
from ._hash import manifest_of as manifest_of
from ._hash import skill_hash as skill_hash
from ._index import SkillIndex as SkillIndex
from ._inline import InlineSkill as InlineSkill
from ._install import NameConflictError as NameConflictError
from ._install import install as install
from ._install import remove as remove
from ._install import source_kind as source_kind
from ._install import update as update
from ._materialize import materialize as materialize
from ._model import ManifestEntry as ManifestEntry
from ._model import Skill as Skill
from ._model import SkillManifest as SkillManifest
from ._model import SkillProperties as SkillProperties
from ._model import Tier as Tier
from ._parse import ParsedSkillMd as ParsedSkillMd
from ._parse import load_skill as load_skill
from ._parse import parse_skill_md as parse_skill_md
from ._requires import CommandChecker as CommandChecker
from ._search import SearchDoc as SearchDoc
from ._search import SearchHit as SearchHit
from ._search import SkillSearch as SkillSearch
from ._search import search_doc as search_doc
from ._sign import SignatureCheck as SignatureCheck
from ._sign import SignatureError as SignatureError
from ._sign import check_signature as check_signature
from ._sign import sign_skill as sign_skill
from ._sign import signature_path as signature_path
from ._snapshot import BlobStore as BlobStore
from ._snapshot import read_manifest_file as read_manifest_file
from ._snapshot import skill_from_manifest as skill_from_manifest
from ._snapshot import snapshot_skill as snapshot_skill
from ._toolsets import ScriptTool as ScriptTool
from ._toolsets import ToolsetError as ToolsetError
from ._toolsets import argument_problem as argument_problem
from ._toolsets import parse_toolset as parse_toolset
from ._toolsets import read_toolset as read_toolset
from ._triggers import TriggerError as TriggerError
from ._triggers import Triggers as Triggers
from ._triggers import file_trigger as file_trigger
from ._triggers import message_trigger as message_trigger
from ._triggers import parse_triggers as parse_triggers
from ._watch import SkillWatcher as SkillWatcher

__all__ = [
    "BlobStore",
    "Catalog",
    "CatalogEntry",
    "CatalogRecord",
    "CommandChecker",
    "ConfigError",
    "DependencyError",
    "DuplicateSkillError",
    "EnvRecord",
    "EnvState",
    "InlineSkill",
    "InstallError",
    "InstalledSkill",
    "ManifestEntry",
    "ManifestError",
    "McpServerConfig",
    "ModelConfig",
    "NameConflictError",
    "Need",
    "ParsedSkillMd",
    "Problem",
    "Provenance",
    "Rejected",
    "Role",
    "ScriptTool",
    "SearchDoc",
    "SearchHit",
    "ServiceConfig",
    "ServiceToken",
    "Shadowed",
    "SignatureCheck",
    "SignatureError",
    "Skill",
    "SkillChangedError",
    "SkillError",
    "SkillIndex",
    "SkillIndexError",
    "SkillManifest",
    "SkillNotFoundError",
    "SkillProperties",
    "SkillSearch",
    "SkillSource",
    "SkillTreeError",
    "SkillValidationError",
    "SkillWatcher",
    "SkillsConfig",
    "SourceConfig",
    "Status",
    "Tier",
    "ToolsetError",
    "TriggerError",
    "Triggers",
    "add_service_token",
    "argument_problem",
    "build_catalog",
    "build_catalog_async",
    "build_env",
    "check_env",
    "check_signature",
    "config_path",
    "default_sources",
    "env_state",
    "file_trigger",
    "filter_reason",
    "find_skill_dirs",
    "hash_manifest",
    "install",
    "install_dir",
    "load_config",
    "load_mcp_servers",
    "load_model_config",
    "load_policy_section",
    "load_service_config",
    "load_skill",
    "make_manifest",
    "manifest_of",
    "materialize",
    "message_trigger",
    "parse_requires",
    "parse_skill_md",
    "parse_toolset",
    "parse_triggers",
    "python_requirements",
    "read_manifest_file",
    "read_toolset",
    "remove",
    "remove_service_tokens",
    "save_config",
    "search_doc",
    "sign_skill",
    "signature_path",
    "skill_from_manifest",
    "skill_hash",
    "snapshot_skill",
    "source_kind",
    "split_skill_dirs",
    "trusted_keys_default",
    "trusted_signers",
    "unknown_key",
    "update",
]
