"""Model providers: an OpenAI-compatible HTTP client and a scripted offline model.

    >>> import asyncio
    >>> p = ScriptedProvider(["Hello!", {"content": None, "tool_calls": [{"name": "pin", "arguments": {"content": "x"}}]}])
    >>> asyncio.run(p.complete([{"role": "user", "content": "hi"}])).content
    'Hello!'

Both satisfy the `Provider` protocol of `runtime._provider_types`, so the session loop cannot tell
them apart. `resolve_providers()` turns the `providers=` argument of `Runtime` into instances.

Modules: `scripted` (`ScriptedProvider`), `openai` (`OpenAICompatibleProvider`, JSON and SSE, its
timeouts), `presets` (`PRESETS`, `resolve_providers()`); retry timing lives in `runtime._retry`,
shared with the HTTP trace sink.
"""

from .._retry import parse_retry_after
from .openai import DEFAULT_TIMEOUTS, MAX_ERROR_BODY_CHARS, OpenAICompatibleProvider, ProviderTimeouts
from .presets import PRESETS, ProviderPreset, resolve_providers
from .scripted import DEFAULT_CLOSING_TEXT, ScriptedProvider

__all__ = [
    "DEFAULT_CLOSING_TEXT",
    "DEFAULT_TIMEOUTS",
    "MAX_ERROR_BODY_CHARS",
    "PRESETS",
    "OpenAICompatibleProvider",
    "ProviderPreset",
    "ProviderTimeouts",
    "ScriptedProvider",
    "parse_retry_after",
    "resolve_providers",
]
