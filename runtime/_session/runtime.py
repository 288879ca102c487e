"""`Runtime`: providers, tools, configuration and trace sinks shared by every session it opens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._config import RuntimeConfig, normalize_primitives
from .._provider_types import Provider
from .._providers import OpenAICompatibleProvider, resolve_providers
from .._tokens import CalibratedCounter, TokenCounter, default_counter, tiktoken_knows
from .._tools import Tool, build_tools
from .._trace_writer import JsonlFileSink, TraceSink, TraceWriter, make_sink
from ..errors import ConfigError
from .common import DEFAULT_SYSTEM_PROMPT, check_run_id, check_tool_names, flatten
from .pool import AgentPool
from .session import ChatSession
from .state import SessionState, decode_session


class Runtime:
    """Providers, tools, configuration and trace sinks shared by every session it opens.

    * `providers` — as `resolve_providers()` takes them: `{"openai": "sk-..."}`, a dict with
      `base_url`, or Provider instances such as `ScriptedProvider([...])`.
    * `config` — a `RuntimeConfig` (default: `RuntimeConfig()`).
    * `tools` — plain type-hinted functions or `@tool` functions, offered to every session.
    * `trace_sinks` — sinks to write events to; default (None): a `JsonlFileSink(config.trace_dir)`
      when `config.trace_enabled`. Passing sinks replaces the file sink.
    * `counter` — the `TokenCounter` (default: the process-wide cl100k_base counter).

    Raises `ConfigError` for bad providers, a tool named like an enabled primitive, or `trace=True`
    with nowhere to write."""

    def __init__(
        self,
        providers: Mapping[str, Any],
        *,
        config: RuntimeConfig | None = None,
        tools: Sequence[Any] | None = None,
        trace_sinks: Sequence[TraceSink] | TraceSink | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        self.config = config if config is not None else RuntimeConfig()
        if not isinstance(self.config, RuntimeConfig):
            raise ConfigError(f"config must be a RuntimeConfig, got {type(self.config).__name__}")
        self.providers: dict[str, Provider] = resolve_providers(providers)
        if self.config.default_provider is not None and self.config.default_provider not in self.providers:
            raise ConfigError(
                f"default_provider {self.config.default_provider!r} is not configured; "
                f"providers: {', '.join(sorted(self.providers))}"
            )
        self.tools: dict[str, Tool] = build_tools(tools)
        check_tool_names(self.tools, self.config.cognitive_primitives, "Runtime")
        self.counter = counter if counter is not None else default_counter()
        if trace_sinks is not None:
            self.sink = make_sink(trace_sinks) if self.config.trace is not False else None
        elif self.config.trace_enabled:
            if self.config.trace_dir is None:
                raise ConfigError("trace=True needs a trace_dir or trace_sinks=[...] to write to")
            self.sink = JsonlFileSink(self.config.trace_dir)
        else:
            self.sink = None

    # -- sessions ------------------------------------------------------------------------------
    def chat(
        self,
        system: str | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        provider: str | None = None,
        model: str | None = None,
        cognitive_primitives: Sequence[str] | None = None,
        tools: Sequence[Any] | None = None,
        run_id: str | None = None,
        name: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> ChatSession:
        """A new chat session (one run), or the session `state` was exported from, resumed.

        `name` and `tags` label the run: written on its `turn` events (`metadata.run_name`,
        `metadata.run_tags`, docs/trace-format.md), they name and tag it on the server. A tag is 1–50
        letters, digits or `- _ . : / @ +`; a bad one is a `ConfigError` (`runtime.facts.bad_tags`).

        Use as `async with rt.chat(...) as chat:`. `cognitive_primitives=None` uses the config's list;
        `tools=None` the runtime's tools. With `state`, the state's system prompt, provider, model and
        primitives are used unless given here (a different `system` is refused). `run_id` names a new
        session's run (default: a fresh uuid4), e.g. when a server recorded it before the run began."""
        tool_map = self.tools if tools is None else build_tools(tools)
        labels = _labels(name, tags)
        if state is not None:
            session = self._resume(
                decode_session(state),
                system=system,
                provider=provider,
                model=model,
                cognitive_primitives=cognitive_primitives,
                tools=tool_map,
            )
            session.writer.labels.update(labels)
            return session
        primitives = (
            self.config.cognitive_primitives
            if cognitive_primitives is None
            else normalize_primitives(cognitive_primitives)
        )
        check_tool_names(tool_map, primitives, "chat()")
        run_id = check_run_id(run_id)
        writer = self._writer(run_id)
        writer.labels.update(labels)
        return ChatSession(
            self,
            system=DEFAULT_SYSTEM_PROMPT if system is None else system,
            provider=self._provider_name(provider),
            model=model,
            tools=tool_map,
            primitives=primitives,
            writer=writer,
        )

    def collaborate(
        self,
        *,
        cognitive_primitives: Sequence[str] | None = None,
        state: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> AgentPool:
        """A pool of named agents sharing one run. `cognitive_primitives` is the pool default (None:
        the config's). With `state` (from `pool.export_state()`), `pool.add(name, ...)` resumes that
        agent, and the pool default is the one saved in the state unless given here. `run_id` names a
        new pool's run (default: a fresh uuid4)."""
        return AgentPool(self, cognitive_primitives=cognitive_primitives, state=state, run_id=run_id)

    def _resume(
        self,
        saved: SessionState,
        *,
        system: str | None,
        provider: str | None,
        model: str | None,
        cognitive_primitives: Sequence[str] | None,
        tools: Mapping[str, Tool],
        pool_writer: TraceWriter | None = None,
        agent: str | None = None,
    ) -> ChatSession:
        """The session `saved` (a decoded `export_state()`) continues in, resolved against this
        runtime: the saved provider if it is configured (else `provider`, else the default), the saved
        model and primitives unless given, and a writer for the saved run with its budget totals. A
        pool's agent (`pool_writer`, `agent`) writes through the pool's writer, whose totals the pool
        restored, and leaves closing the run to the pool."""
        if system is not None and system != saved.system:
            raise ConfigError(
                "state was exported with a different system prompt; pass system=None to resume it"
            )
        prov = provider if provider is not None else saved.provider
        if prov not in self.providers:
            prov = self._provider_name(provider)
        primitives = normalize_primitives(
            saved.cognitive_primitives if cognitive_primitives is None else cognitive_primitives
        )
        check_tool_names(tools, primitives, "chat(state=...)")
        writer = pool_writer
        if writer is None:
            writer = self._writer(saved.run_id)
            writer.budgets.restore(saved.budgets)
        return ChatSession(
            self,
            system=saved.system,
            provider=prov,
            model=model if model is not None else saved.model,
            tools=tools,
            primitives=primitives,
            writer=writer,
            agent=agent,
            owns_run=pool_writer is None,
            state=saved,
        )

    # -- helpers -------------------------------------------------------------------------------
    def counter_for(self, provider: Provider, model: str | None) -> TokenCounter | CalibratedCounter:
        """The counter a session with `provider` / `model` builds with: this runtime's counter, or,
        for a model whose tokenizer tiktoken does not have (`config.token_calibration` None = decide
        so; True/False forces it), a `CalibratedCounter` over it that learns the provider's ratio.
        Only providers that report real token usage (OpenAI-compatible endpoints) are calibrated by
        default: the scripted provider's usage counts words."""
        setting = self.config.token_calibration
        name = model or getattr(provider, "model", None)
        calibrate = (
            isinstance(provider, OpenAICompatibleProvider) and not tiktoken_knows(name)
            if setting is None
            else setting
        )
        return CalibratedCounter(self.counter) if calibrate else self.counter

    def _writer(self, run_id: str) -> TraceWriter:
        return TraceWriter(self.sink, run_id, deterministic_ids=self.config.deterministic_step_ids)

    def _provider_name(self, name: str | None) -> str:
        if name is None:
            return self.config.default_provider or next(iter(self.providers))
        if name not in self.providers:
            raise ConfigError(f"unknown provider {name!r}; configured: {', '.join(sorted(self.providers))}")
        return name

    def trace_file(self, run_id: str) -> Path | None:
        """The JSONL file this runtime writes `run_id` to, if it writes one."""
        for sink in flatten(self.sink):
            if isinstance(sink, JsonlFileSink):
                return sink.path_for(run_id)
        return None

    async def aclose(self) -> None:
        """Close every provider and sink (flushes the HTTP sink)."""
        for p in self.providers.values():
            await p.aclose()
        if self.sink is not None:
            self.sink.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _labels(name: str | None, tags: Sequence[str] | None) -> dict[str, Any]:
    """The `turn` events' `run_name` / `run_tags` for `chat(name=…, tags=…)` (nothing when unset)."""
    from ..facts import bad_tags, clean_name, clean_tags

    labels: dict[str, Any] = {}
    if name is not None:
        labels["run_name"] = clean_name(name)
    if tags is not None:
        problems = bad_tags(list(tags))
        if problems:
            raise ConfigError("; ".join(problems))
        labels["run_tags"] = clean_tags(list(tags))
    return labels
