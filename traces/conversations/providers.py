"""Providers on the server: `ARCANA_PROVIDERS` parsed, and what a conversation may use."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runtime import OpenAICompatibleProvider, ProviderResponse, ScriptedProvider
from runtime.scenarios import SCENARIOS

SCRIPTED = "scripted"
PRIMITIVES = ("recall", "pin")


class ProviderChoice(TypedDict):
    name: str
    kind: str  # "scripted" | "openai"
    models: list[str]
    default_model: str


@dataclass(frozen=True)
class ServerProvider:
    """One entry of `ARCANA_PROVIDERS`: an OpenAI-compatible endpoint. `api_key_env` names the
    environment variable holding its key (read when a worker builds the provider, never stored)."""

    name: str
    base_url: str
    models: tuple[str, ...]
    api_key_env: str | None = None
    stream: bool = False
    timeout: float | None = None
    max_retries: int | None = None

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


def parse_providers(raw: str) -> dict[str, ServerProvider]:
    """`ARCANA_PROVIDERS` (JSON text) → providers by name. Raises `ImproperlyConfigured` naming the entry.

        >>> parse_providers('{"local": {"base_url": "http://127.0.0.1:8001/v1", "models": ["llama3"]}}')
        {'local': ServerProvider(name='local', base_url='http://127.0.0.1:8001/v1', models=('llama3',), ...)}

    A name that is a runtime preset (`openai`, `deepseek`, ...) may omit `base_url` and `model`: the
    preset's are used, and its key variable (`OPENAI_API_KEY`, ...) unless `api_key_env` says otherwise.
    """
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"ARCANA_PROVIDERS is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ImproperlyConfigured("ARCANA_PROVIDERS must be a JSON object: name -> {base_url, model, ...}")
    presets = _presets()
    out: dict[str, ServerProvider] = {}
    for name, entry in data.items():
        where = f"ARCANA_PROVIDERS[{name!r}]"
        if not isinstance(name, str) or not name or len(name) > 100 or name == SCRIPTED:
            raise ImproperlyConfigured(
                f"{where}: a provider name must be 1-100 characters and not {SCRIPTED!r}"
            )
        if not isinstance(entry, dict):
            raise ImproperlyConfigured(f"{where} must be an object")
        unknown = set(entry) - {
            "base_url",
            "model",
            "models",
            "api_key_env",
            "stream",
            "timeout",
            "max_retries",
        }
        if unknown:
            raise ImproperlyConfigured(f"{where}: unknown keys {sorted(unknown)}")
        preset = presets.get(name)
        base_url = entry.get("base_url") or (preset.base_url if preset else None)
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ImproperlyConfigured(f"{where}: 'base_url' must be an http(s) URL")
        models = entry.get("models")
        if models is None:
            model = entry.get("model") or (preset.model if preset else None)
            models = [model] if model else []
        if (
            not isinstance(models, list)
            or not models
            or not all(isinstance(m, str) and 0 < len(m) <= 200 for m in models)
        ):
            raise ImproperlyConfigured(f"{where}: give 'model' (a string) or 'models' (a list of strings)")
        key_env = entry.get("api_key_env")
        if key_env is None and preset is not None:
            key_env = preset.api_key_env
        if key_env is not None and (not isinstance(key_env, str) or not key_env):
            raise ImproperlyConfigured(f"{where}: 'api_key_env' must name an environment variable")
        stream = entry.get("stream", False)
        if not isinstance(stream, bool):
            raise ImproperlyConfigured(f"{where}: 'stream' must be true or false")
        timeout = entry.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
            raise ImproperlyConfigured(f"{where}: 'timeout' must be a number of seconds")
        retries = entry.get("max_retries")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ImproperlyConfigured(f"{where}: 'max_retries' must be an integer >= 0")
        out[name] = ServerProvider(name, base_url, tuple(models), key_env, stream, timeout, retries)
    return out


def _presets() -> Mapping[str, Any]:
    import runtime

    return runtime.PRESETS


def server_providers() -> dict[str, ServerProvider]:
    """The configured OpenAI-compatible providers (`settings.ARCANA_PROVIDERS`), parsed."""
    return parse_providers(str(getattr(settings, "ARCANA_PROVIDERS", "") or ""))


def available_providers() -> list[ProviderChoice]:
    """What the new-run form and `GET /api/v1/conversations/providers` offer: `scripted` (its
    scenarios as models) first, then the configured endpoints. No key, no base URL."""
    scenarios = sorted(SCENARIOS)
    out: list[ProviderChoice] = [
        ProviderChoice(name=SCRIPTED, kind="scripted", models=scenarios, default_model="pin-recall-demo")
    ]
    for p in server_providers().values():
        out.append(
            ProviderChoice(name=p.name, kind="openai", models=list(p.models), default_model=p.models[0])
        )
    return out


def scenario_details() -> dict[str, dict[str, Any]]:
    """Each scripted scenario's suggested script and settings (to prefill a form)."""
    return {name: s.describe() for name, s in SCENARIOS.items()}


class ProviderNotConfigured(LookupError):
    """A provider named by a stored judge or check that `ARCANA_PROVIDERS` no longer lists."""


def ask_once(
    provider: str, model: str, messages: list[dict[str, Any]], scripted: str
) -> tuple[str | None, int]:
    """One non-streamed completion at temperature 0, for the judges and the lost-instruction checks:
    `scripted` is the offline provider's answer; otherwise the server's provider `provider` is asked.
    Runs its own event loop in this thread (no ORM inside it). Returns the answer and its total
    tokens; raises `ProviderError`, or `ProviderNotConfigured`."""
    client: Any
    if provider == SCRIPTED:
        delay = int(settings.ARCANA_SCRIPTED_STEP_MS) / 1000
        client = ScriptedProvider([scripted], delay=delay, model=model)
    else:
        sp = server_providers().get(provider)
        if sp is None:
            raise ProviderNotConfigured(f"provider {provider!r} is not configured (ARCANA_PROVIDERS)")
        options: dict[str, Any] = {
            "base_url": sp.base_url,
            "api_key": sp.api_key,
            "model": model,
            "stream": False,
        }
        if sp.timeout is not None:
            options["timeout"] = sp.timeout
        if sp.max_retries is not None:
            options["max_retries"] = sp.max_retries
        client = OpenAICompatibleProvider(sp.name, **options)

    async def ask() -> ProviderResponse:
        try:
            return await client.complete(messages, model=model, temperature=0)
        finally:
            await client.aclose()

    loop = asyncio.new_event_loop()
    try:
        response = loop.run_until_complete(ask())
    finally:
        loop.close()
    usage = response.usage
    return response.content, int(usage.total_tokens) if usage is not None else 0
