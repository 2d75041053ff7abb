"""Model adapters: one canonical request/response, many providers.

``ScriptedModel`` and ``RecordedModel`` answer offline (tests, demos, replay);
``AnthropicAdapter`` and ``OpenAIAdapter`` call the providers through their SDKs, which
are optional extras imported only when an adapter is constructed. See docs/adapters.md.
"""

from ._anthropic import AnthropicAdapter as AnthropicAdapter
from ._errors import AdapterConfigError as AdapterConfigError
from ._errors import RecordingError as RecordingError
from ._errors import ScriptError as ScriptError
from ._errors import ToolNameError as ToolNameError
from ._openai import OpenAIAdapter as OpenAIAdapter
from ._recorded import RecordedModel as RecordedModel
from ._script import Script as Script
from ._script import ScriptFailure as ScriptFailure
from ._script import ScriptToolCall as ScriptToolCall
from ._script import ScriptTurn as ScriptTurn
from ._script import load_script as load_script
from ._script import parse_script as parse_script
from ._scripted import ScriptedModel as ScriptedModel
from ._sdk import retry_after_ms as retry_after_ms
from ._spec import adapter_from_spec as adapter_from_spec
from ._wire import WireNames as WireNames

__all__ = [
    "AdapterConfigError",
    "AnthropicAdapter",
    "OpenAIAdapter",
    "RecordedModel",
    "RecordingError",
    "Script",
    "ScriptError",
    "ScriptFailure",
    "ScriptToolCall",
    "ScriptTurn",
    "ScriptedModel",
    "ToolNameError",
    "WireNames",
    "adapter_from_spec",
    "load_script",
    "parse_script",
    "retry_after_ms",
]
