"""Known public endpoints and `resolve_providers()`, which turns `Runtime(providers=...)` into instances."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._provider_types import Provider
from ..errors import (
    ConfigError,
)
from .openai import OpenAICompatibleProvider

# --------------------------------------------------------------------------------------------------
# Presets and resolution
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderPreset:
    """A known public endpoint: its base URL, default model and the env var holding its key."""

    base_url: str
    model: str
    api_key_env: str
    key_required: bool = True  # a local server (Ollama) answers without one


#: The providers arcana-agent 1.2 users already name, with the base URLs and default models it uses
#: (its `arcana providers` table). Every one speaks OpenAI-compatible chat completions.
PRESETS: Mapping[str, ProviderPreset] = {
    "deepseek": ProviderPreset("https://api.deepseek.com/v1", "deepseek-chat", "DEEPSEEK_API_KEY"),
    "gemini": ProviderPreset(
        "https://generativelanguage.googleapis.com/v1beta/openai", "gemini-2.0-flash", "GEMINI_API_KEY"
    ),
    "glm": ProviderPreset("https://open.bigmodel.cn/api/paas/v4", "glm-4-flash", "GLM_API_KEY"),
    "kimi": ProviderPreset("https://api.moonshot.cn/v1", "moonshot-v1-8k", "KIMI_API_KEY"),
    "minimax": ProviderPreset("https://api.minimax.chat/v1", "abab6.5s-chat", "MINIMAX_API_KEY"),
    "ollama": ProviderPreset("http://localhost:11434/v1", "llama3.2", "OLLAMA_API_KEY", key_required=False),
    "openai": ProviderPreset("https://api.openai.com/v1", "gpt-4o-mini", "OPENAI_API_KEY"),
}

_SPEC_KEYS = ("api_key", "base_url", "model", "timeout", "max_retries", "stream", "extra_headers", "client")


def resolve_providers(spec: Mapping[str, Any]) -> dict[str, Provider]:
    """Turn the `providers=` argument of `Runtime` into provider instances, keyed by name.

        >>> ps = resolve_providers({"openai": "sk-..."})                            # preset + key
        >>> ps = resolve_providers({"deepseek": {"api_key": "sk-...", "model": "deepseek-reasoner"}})
        >>> ps = resolve_providers({"local": {"base_url": "http://127.0.0.1:8001/v1", "model": "m"}})
        >>> ps = resolve_providers({"scripted": ScriptedProvider(["hi"])})         # passed through
        >>> sorted(ps)
        ['scripted']

    Rules, per entry:
    - a `Provider` instance is kept as it is;
    - a string is the API key of a preset (`openai`, `deepseek`, `gemini`, `kimi`, `glm`, `minimax`, `ollama`);
    - a dict (keys: api_key, base_url, model, timeout, max_retries, stream, extra_headers, client)
      overrides the preset of the same name, or, for any other name, must hold `base_url` (a custom
      endpoint) and `model`;
    - a preset without an `api_key` takes it from its env var (`OPENAI_API_KEY`, `DEEPSEEK_API_KEY`)
      only when `base_url` is the preset's own; a custom endpoint needs no key.
    Anything else raises `ConfigError` naming the entry.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError(f"providers must be a dict of name -> config, got {type(spec).__name__}")
    if not spec:
        raise ConfigError("providers is empty: configure at least one (e.g. {'openai': 'sk-...'})")
    resolved: dict[str, Provider] = {}
    for name, value in spec.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"provider names must be non-empty strings, got {name!r}")
        resolved[name] = _resolve_one(name, value)
    return resolved


def _resolve_one(name: str, value: Any) -> Provider:
    if isinstance(value, Provider):
        return value
    preset = PRESETS.get(name)
    known = ", ".join(sorted(PRESETS))
    if isinstance(value, str):
        if preset is None:
            raise ConfigError(
                f"provider {name!r}: a string value is an API key for a preset ({known}); "
                f"for a custom endpoint pass a dict with 'base_url' and 'model'"
            )
        value = {"api_key": value}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"provider {name!r}: expected an API key string, a config dict or a Provider instance, "
            f"got {type(value).__name__}"
        )
    unknown = set(value) - set(_SPEC_KEYS)
    if unknown:
        raise ConfigError(
            f"provider {name!r}: unknown keys {sorted(unknown)} (allowed: {', '.join(_SPEC_KEYS)})"
        )
    options = dict(value)
    if preset is None and not options.get("base_url"):
        raise ConfigError(
            f"provider {name!r} is not a preset ({known}): give it a 'base_url' (a custom OpenAI-compatible endpoint)"
        )
    base_url = options.pop("base_url", None) or (preset.base_url if preset else "")
    model = options.pop("model", None) or (preset.model if preset else None)
    if not model:
        raise ConfigError(f"provider {name!r}: no 'model' given and no preset default")
    api_key = options.pop("api_key", None)
    if preset is not None and base_url.rstrip("/") == preset.base_url:
        api_key = api_key or os.environ.get(preset.api_key_env) or None
        if not api_key and preset.key_required:
            raise ConfigError(
                f"provider {name!r}: no API key; pass {{{name!r}: 'sk-...'}} or set {preset.api_key_env}"
            )
    return OpenAICompatibleProvider(name, base_url=base_url, api_key=api_key, model=model, **options)
