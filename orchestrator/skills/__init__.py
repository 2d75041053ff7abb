"""Skills as packages on disk or in code: parse, validate, hash, discover, index, install.

Everything about a skill before a model sees it. See ``docs/skills.md`` (discovery,
precedence, configuration, install) and ``docs/skill-hash.md`` (the hash definition).
"""

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
from ._inline import InlineSkill as InlineSkill
from ._model import ManifestEntry as ManifestEntry
from ._model import Skill as Skill
from ._model import SkillManifest as SkillManifest
from ._model import SkillProperties as SkillProperties
from ._model import Tier as Tier
from ._parse import ParsedSkillMd as ParsedSkillMd
from ._parse import load_skill as load_skill
from ._parse import parse_skill_md as parse_skill_md
from ._snapshot import BlobStore as BlobStore
from ._snapshot import read_manifest_file as read_manifest_file
from ._snapshot import skill_from_manifest as skill_from_manifest
from ._snapshot import snapshot_skill as snapshot_skill

__all__ = [
    "BlobStore",
    "ConfigError",
    "DuplicateSkillError",
    "InlineSkill",
    "InstallError",
    "ManifestEntry",
    "ManifestError",
    "ParsedSkillMd",
    "Problem",
    "Skill",
    "SkillChangedError",
    "SkillError",
    "SkillIndexError",
    "SkillManifest",
    "SkillNotFoundError",
    "SkillProperties",
    "SkillTreeError",
    "SkillValidationError",
    "Tier",
    "hash_manifest",
    "load_skill",
    "make_manifest",
    "manifest_of",
    "parse_skill_md",
    "read_manifest_file",
    "skill_from_manifest",
    "skill_hash",
    "snapshot_skill",
]
