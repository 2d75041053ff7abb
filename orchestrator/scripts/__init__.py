"""Running a skill's script: the path gate, the sandbox (bubblewrap), resource limits,
cgroups, supervision (timeouts, output caps, the process group killed) and private work
directories (docs/scripts.md).

A walled-off part of the core with one face: it decides nothing about policy and records
nothing; the tool-call pipeline asks it to run a request and records what it returns.
"""

from ._limits import Enforcement as Enforcement
from ._limits import LimitsOverride as LimitsOverride
from ._limits import ScriptLimits as ScriptLimits
from ._limits import check_limits as check_limits
from ._paths import PathRefusedError as PathRefusedError
from ._paths import check_relative_path as check_relative_path
from ._paths import read_skill_file as read_skill_file
from ._paths import resolve_in_root as resolve_in_root
from ._run import SANDBOX_UNAVAILABLE as SANDBOX_UNAVAILABLE
from ._run import SandboxPolicy as SandboxPolicy
from ._run import SandboxUsed as SandboxUsed
from ._run import ScriptRefusedError as ScriptRefusedError
from ._run import ScriptRequest as ScriptRequest
from ._run import ScriptResult as ScriptResult
from ._run import run_script as run_script
from ._sandbox import sandbox_available as sandbox_available
from ._workdir import WorkdirError as WorkdirError
from ._workdir import materialize as materialize

__all__ = [
    "SANDBOX_UNAVAILABLE",
    "Enforcement",
    "LimitsOverride",
    "PathRefusedError",
    "SandboxPolicy",
    "SandboxUsed",
    "ScriptLimits",
    "ScriptRefusedError",
    "ScriptRequest",
    "ScriptResult",
    "WorkdirError",
    "check_limits",
    "check_relative_path",
    "materialize",
    "read_skill_file",
    "resolve_in_root",
    "run_script",
    "sandbox_available",
]
