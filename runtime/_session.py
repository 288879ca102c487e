"""`Runtime`, `ChatSession`, `AgentPool` and `Reply`: the conversation loop.

    >>> rt = Runtime(providers={"scripted": ScriptedProvider(["Hello!"])},
    ...              config=RuntimeConfig(trace_dir="./traces"), tools=[get_weather])
    >>> async with rt.chat(system="You are terse.") as chat:          # one run, one trace file
    ...     reply = await chat.send("hi")                               # turn 1
    ...     state = chat.export_state()                                 # JSON-safe
    >>> async with rt.chat(state=state) as chat:                        # resumes exactly (any process)
    ...     await chat.send("and then?")                                # turn 2, same run_id
    >>> async with rt.collaborate(cognitive_primitives=["pin"]) as pool:
    ...     a = pool.add("planner", system="...")                       # own history, turns, pins
    ...     await a.send("plan it")

Words (DESIGN.md §1): a **run** is one chat session or one pool (one `run_id`, minted once); a
**turn** is one `send()` and everything it caused, numbered from 1 across the session; a **step** is one
LLM call inside a turn, numbered from 1 within the turn.

One step: build the working set (history + active pins, within the window) → write its
`context_decision` (and optional `prompt_snapshot`) → call the provider → write the `turn` and
`llm_call` events → run the primitive calls, then the tool calls (results go back in the model's call
order) → next step, until the model answers without tool calls or `max_steps_per_turn` is reached.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._config import ALL_PRIMITIVE_TOOL_NAMES, RuntimeConfig, normalize_primitives, primitive_tool_names
from ._primitives import CognitiveHandler, PrimitiveOutcome
from ._provider_types import Provider, ProviderResponse, Usage
from ._providers import resolve_providers
from ._tokens import REPLY_PRIMING_TOKENS, TokenCounter, default_counter
from ._tools import Tool, ToolOutcome, build_tools, run_tool
from ._trace_reader import TraceReader
from ._trace_writer import JsonlFileSink, MultiSink, TraceSink, TraceWriter, digest, make_sink
from ._working_set import SUMMARY_MAX_TOKENS, WorkingSetBuilder
from .errors import ConfigError, ContextOverflowError, ProviderError

__all__ = ["AgentPool", "ChatSession", "Reply", "Runtime"]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
STATE_FORMAT = "arcana-console/session-state"
POOL_STATE_FORMAT = "arcana-console/pool-state"
STATE_VERSION = 1

#: `Reply.outcome` values.
OUTCOME_ANSWERED = "answered"
OUTCOME_EMPTY = "empty_response"
OUTCOME_MAX_STEPS = "max_steps"
OUTCOME_STOPPED = "stopped"


@dataclass(frozen=True)
class Reply:
    """What one `send()` produced.

    * `content` — the model's answer (None when the turn ended without one: `outcome == "max_steps"`).
    * `turn` — this send's 1-based turn number within the session (or pool agent).
    * `run_id` — the session's (or pool's) run, the stem of its trace file.
    * `steps` — LLM calls made in this turn.
    * `tool_calls` — every tool and primitive call of the turn, in order:
      `{"step", "id", "name", "kind": "tool"|"primitive"|"unknown", "arguments", "result"}`.
    * `usage` — summed provider usage of the turn (summarizer calls included).
    * `outcome` — "answered", "empty_response", "max_steps", or "stopped" (`ChatSession.stop_check`
      asked the turn to end after a step).
    """

    content: str | None
    turn: int
    run_id: str
    steps: int
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    outcome: str = OUTCOME_ANSWERED
    agent: str | None = None


def _add_usage(a: Usage, b: Usage | None) -> Usage:
    if b is None:
        return a
    return Usage(
        a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens,
        a.total_tokens + b.total_tokens,
    )


def _check_tool_names(tools: Mapping[str, Tool], primitives: Sequence[str], where: str) -> None:
    clash = sorted(set(tools) & set(primitive_tool_names(primitives)))
    if clash:
        raise ConfigError(
            f"{where}: tool(s) {', '.join(repr(c) for c in clash)} have the name of an enabled cognitive "
            "primitive; rename the tool or disable the primitive"
        )


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
        _check_tool_names(self.tools, self.config.cognitive_primitives, "Runtime")
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
    ) -> ChatSession:
        """A new chat session (one run), or the session `state` was exported from, resumed.

        Use as `async with rt.chat(...) as chat:`. `cognitive_primitives=None` uses the config's list;
        `tools=None` the runtime's tools. With `state`, the state's system prompt, provider, model and
        primitives are used unless given here (a different `system` is refused). `run_id` names a new
        session's run (default: a fresh uuid4), e.g. when a server recorded it before the run began."""
        tool_map = self.tools if tools is None else build_tools(tools)
        if state is not None:
            return ChatSession._from_state(
                self,
                state,
                system=system,
                provider=provider,
                model=model,
                cognitive_primitives=cognitive_primitives,
                tools=tool_map,
                writer=None,
            )
        primitives = (
            self.config.cognitive_primitives
            if cognitive_primitives is None
            else normalize_primitives(cognitive_primitives)
        )
        _check_tool_names(tool_map, primitives, "chat()")
        run_id = _check_run_id(run_id)
        return ChatSession(
            self,
            system=DEFAULT_SYSTEM_PROMPT if system is None else system,
            provider=self._provider_name(provider),
            model=model,
            tools=tool_map,
            primitives=primitives,
            writer=self._writer(run_id),
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

    # -- helpers -------------------------------------------------------------------------------
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
        for sink in _flatten(self.sink):
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


def _check_run_id(run_id: str | None) -> str:
    if run_id is None:
        return str(uuid.uuid4())
    if not isinstance(run_id, str) or not run_id.strip() or len(run_id) > 200:
        raise ConfigError(f"run_id must be a non-empty string of at most 200 characters, got {run_id!r}")
    return run_id


def _flatten(sink: Any) -> list[Any]:
    if sink is None:
        return []
    if isinstance(sink, MultiSink):
        return [s for inner in sink.sinks for s in _flatten(inner)]
    return [sink]


class ChatSession:
    """One conversation: its history, turn counter, pins and recall log. Made by `Runtime.chat()` or
    `AgentPool.add()`; use `send()`. Not safe to `send()` twice at once (calls are serialized)."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        system: str,
        provider: str,
        model: str | None,
        tools: Mapping[str, Tool],
        primitives: Sequence[str],
        writer: TraceWriter,
        agent: str | None = None,
        pool: AgentPool | None = None,
    ) -> None:
        if not isinstance(system, str):
            raise ConfigError(f"system must be a string, got {type(system).__name__}")
        self.runtime = runtime
        self.config = runtime.config
        self.provider_name = provider
        self.provider: Provider = runtime.providers[provider]
        self.model = model
        self.tools: dict[str, Tool] = dict(tools)
        self.writer = writer
        self.run_id = writer.run_id
        self.agent = agent
        self._pool = pool
        self.history: list[dict[str, Any]] = [{"role": "system", "content": system}]
        # The 1-based turn of each history message (0 for the system prompt), for recall.
        self._message_turns: list[int] = [0]
        # Turns before this one are not in `history` (a state exported without history); recall reads
        # them from the trace.
        self._first_turn_in_memory = 1
        self.turn = 0
        self._in_turn = False
        self._spine: str | None = None  # step_id of the last `turn` event: the next one's parent
        self.counter = runtime.counter
        self.cognitive = CognitiveHandler(
            primitives,
            counter=self.counter,
            context_window=self.config.context_window,
            pin_budget_fraction=self.config.pin_budget_fraction,
            memory=self._memory_messages,
            trace=self._trace_messages,
        )
        self.builder = WorkingSetBuilder(
            self.counter,
            context_window=self.config.context_window,
            strategy=self.config.context_strategy,
            response_reserve=self.config.response_reserve,
        )
        self._lock = asyncio.Lock()
        self._closed = False
        #: Asked before every step after the first of a turn; a `(stop_reason, detail)` answer ends the
        #: turn there (outcome "stopped") with a `state_change` event carrying that `stop_reason` —
        #: how a server cancels a conversation "after the current step" or enforces a token limit.
        #: Called from the event loop: it must be fast and must not block (read a flag).
        self.stop_check: Callable[[], tuple[str, str] | None] | None = None

    # -- public --------------------------------------------------------------------------------
    @property
    def system(self) -> str:
        return self.history[0]["content"]

    @property
    def cognitive_primitives(self) -> tuple[str, ...]:
        return self.cognitive.enabled

    @property
    def pins(self) -> list[dict[str, Any]]:
        """Every pin of the session (active, expired and unpinned), as dicts."""
        return self.cognitive.pins.to_list()

    @property
    def recall_log(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.cognitive.recall_log]

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools offered to the model at every step: user tools, then enabled primitives."""
        return [t.schema for t in self.tools.values()] + self.cognitive.schemas()

    async def send(self, text: str) -> Reply:
        """Run one turn: add the user message, loop steps until an answer or `max_steps_per_turn`.

        Raises `ContextOverflowError` (before any provider call, nothing recorded) when the message
        cannot fit the window even with only the system prompt and tool schemas; a `ProviderError`
        (after writing an `error` event) when the provider fails — the turn then stays in the history
        and the trace as far as it got, and the next `send()` is the next turn."""
        if not isinstance(text, str):
            raise TypeError(f"send() takes a string, got {type(text).__name__}")
        async with self._lock:
            if self._closed:
                raise ConfigError("this session is closed")
            return await self._run_turn(text)

    def export_state(self, *, include_history: bool = True) -> dict[str, Any]:
        """Everything needed to continue this conversation elsewhere, as a JSON-safe dict.

        With `include_history=False` only the system prompt is kept: the model then starts from a
        fresh context, and `recall` reads earlier turns from the session's trace."""
        if self._in_turn:
            raise ConfigError("export_state() cannot run while a turn is in progress")
        cursor = None
        export = getattr(self.provider, "export_state", None)
        if callable(export):
            cursor = export()
        if include_history:
            history, turns, first = self.history, self._message_turns, self._first_turn_in_memory
        else:
            history, turns, first = self.history[:1], [0], self.turn + 1
        state = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "agent": self.agent,
            "system": self.system,
            "provider": self.provider_name,
            "model": self.model,
            "cognitive_primitives": list(self.cognitive.enabled),
            "turn": self.turn,
            "spine": self._spine,
            "include_history": include_history,
            "history": copy.deepcopy(history),
            "message_turns": list(turns),
            "first_turn_in_memory": first,
            "pins": self.cognitive.pins.to_list(),
            "recall_log": [r.to_dict() for r in self.cognitive.recall_log],
            "budgets": self.writer.budgets.to_dict(),
            "provider_cursor": cursor,
        }
        # Guarantee JSON-safety now, not when the caller serializes it.
        return json.loads(json.dumps(state, ensure_ascii=False))

    async def aclose(self) -> None:
        """Flush the trace; a plain chat also closes its trace file (a pool closes it on exit)."""
        self._closed = True
        if self._pool is None:
            _close_run(self.runtime.sink, self.run_id)

    async def __aenter__(self) -> ChatSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        who = f" agent={self.agent!r}" if self.agent else ""
        return f"<ChatSession run_id={self.run_id}{who} turn={self.turn}>"

    # -- the loop ------------------------------------------------------------------------------
    async def _run_turn(self, text: str) -> Reply:
        user_msg = {"role": "user", "content": text}
        tools = self.tool_schemas()
        self._check_fits(user_msg, tools)
        self.turn += 1
        turn = self.turn
        self._in_turn = True
        try:
            return await self._steps(turn, user_msg, tools)
        finally:
            self._in_turn = False

    async def _steps(self, turn: int, user_msg: dict[str, Any], tools: list[dict[str, Any]]) -> Reply:
        self._append(user_msg, turn)
        new_messages: list[dict[str, Any]] = [user_msg]
        usage = Usage()
        calls_made: list[dict[str, Any]] = []
        tools_arg = tools or None
        max_steps = self.config.max_steps_per_turn
        for step in range(1, max_steps + 1):
            if step > 1 and self.stop_check is not None:
                stop = self.stop_check()
                if stop is not None:
                    self._emit_stop(stop, turn, step - 1)
                    return self._reply(None, turn, step - 1, calls_made, usage, OUTCOME_STOPPED)
            step_id = self.writer.step_id_for(turn, step)
            summary_usage: list[Usage] = []
            try:
                ws = await self.builder.build(
                    self.history,
                    tools=tools,
                    pins=self.cognitive.pin_blocks(turn),
                    turn=turn,
                    step=step,
                    summarize=self._summarizer(turn, step, step_id, summary_usage),
                    message_turns=self._message_turns,
                )
            except ContextOverflowError as exc:
                # Identity + task + pins no longer fit (e.g. a huge tool result is the task's tail).
                self._emit_error(exc, "context_overflow", turn, step, step_id)
                raise
            for u in summary_usage:
                usage = _add_usage(usage, u)
            self._emit_decision(ws.decision, turn, step, step_id)
            if self.config.trace_include_prompt_snapshots:
                self._emit_snapshot(ws.messages, tools, turn, step, step_id)
            started = time.perf_counter()
            try:
                resp = await self.provider.complete(ws.messages, tools=tools_arg, model=self.model)
            except Exception as exc:
                self._emit_provider_error(exc, turn, step, step_id)
                raise
            latency = resp.latency_ms or int((time.perf_counter() - started) * 1000)
            usage = _add_usage(usage, resp.usage)
            assistant = resp.assistant_message()
            self._append(assistant, turn)
            new_messages.append(assistant)
            last = step == max_steps and bool(resp.tool_calls)
            self._emit_turn(resp, new_messages, turn, step, step_id, latency, exhausted=last)
            self._emit_llm_call(ws.messages, tools_arg, resp, turn, step, step_id, latency)
            new_messages = []
            if not resp.tool_calls:
                outcome = OUTCOME_ANSWERED if resp.content else OUTCOME_EMPTY
                return self._reply(resp.content or "", turn, step, calls_made, usage, outcome)
            await self._dispatch(resp, turn, step, step_id, calls_made)
        return self._reply(None, turn, max_steps, calls_made, usage, OUTCOME_MAX_STEPS)

    def _reply(
        self,
        content: str | None,
        turn: int,
        steps: int,
        calls: list[dict[str, Any]],
        usage: Usage,
        outcome: str,
    ) -> Reply:
        return Reply(content, turn, self.run_id, steps, calls, usage, outcome, self.agent)

    def _check_fits(self, user_msg: dict[str, Any], tools: list[dict[str, Any]]) -> None:
        needed = (
            self.counter.count_message(self.history[0])
            + self.counter.count_message(user_msg)
            + self.counter.count_tools(tools)
            + REPLY_PRIMING_TOKENS
        )
        available = self.config.context_window - (self.config.response_reserve or 0)
        if needed > available:
            raise ContextOverflowError(
                f"the message needs {needed} tokens with the system prompt and tool schemas alone, but the "
                f"window leaves {available} ({self.config.context_window} minus a response reserve of "
                f"{self.config.response_reserve}); shorten the message or raise context_window"
            )

    async def _dispatch(
        self, resp: ProviderResponse, turn: int, step: int, step_id: str, calls_made: list[dict[str, Any]]
    ) -> None:
        """Primitive calls first, then tool calls; results appended in the model's call order."""
        results: dict[str, str] = {}
        records: dict[str, dict[str, Any]] = {}
        prim_calls = [c for c in resp.tool_calls if self._is_primitive(c.name)]
        tool_calls = [c for c in resp.tool_calls if not self._is_primitive(c.name)]
        for call in prim_calls:
            outcome = self.cognitive.handle(call.name, call.arguments, turn=turn, step=step)
            self._emit_primitive(outcome, call.id, turn, step, step_id)
            results[call.id] = outcome.content
            records[call.id] = {
                "step": step,
                "id": call.id,
                "name": call.name,
                "kind": "primitive",
                "arguments": outcome.args,
                "result": outcome.result,
            }
        for call in tool_calls:
            t = self.tools.get(call.name)
            if t is None:
                content = self._unknown_tool(call.id, call.name, call.arguments, turn, step, step_id)
                kind = "unknown"
                result: Any = json.loads(content)
            else:
                out = await run_tool(t, call.arguments, max_chars=self.config.tool_result_max_chars)
                self._emit_tool_call(t, call.id, call.arguments, out, turn, step, step_id)
                content, kind, result = out.content, "tool", out.result
            results[call.id] = content
            records[call.id] = {
                "step": step,
                "id": call.id,
                "name": call.name,
                "kind": kind,
                "arguments": _loads_or_raw(call.arguments),
                "result": result,
            }
        for call in resp.tool_calls:
            self._append({"role": "tool", "tool_call_id": call.id, "content": results[call.id]}, turn)
            calls_made.append(records[call.id])

    def _is_primitive(self, name: str) -> bool:
        if name in self.cognitive.tool_names:
            return True
        # A disabled primitive name is answered "not enabled" unless a user tool has that name.
        return name in ALL_PRIMITIVE_TOOL_NAMES and name not in self.tools

    def _unknown_tool(
        self, call_id: str, name: str, arguments: str, turn: int, step: int, step_id: str
    ) -> str:
        available = sorted(self.tools) + list(self.cognitive.tool_names)
        message = f"unknown tool '{name}'; available tools: {', '.join(available) or 'none'}"
        content = json.dumps({"error": message, "error_category": "unknown_tool"}, ensure_ascii=False)
        self.writer.emit(
            "error",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            metadata={
                "error": "unknown_tool",
                "message": message,
                "error_category": "unknown_tool",
                "tool_call_id": call_id,
                "tool_name": name,
                "arguments": _loads_or_raw(arguments),
                "result": content,
            },
        )
        return content

    def _summarizer(self, turn: int, step: int, step_id: str, usages: list[Usage]) -> Any:
        """The builder's one summary call: through this session's provider, traced as `llm_call`."""

        async def summarize(messages: list[dict[str, Any]]) -> str:
            started = time.perf_counter()
            try:
                resp = await self.provider.complete(
                    messages, model=self.model, temperature=0, max_tokens=SUMMARY_MAX_TOKENS
                )
            except Exception as exc:
                # The builder falls back to tail_preserve and the turn goes on, so this error event
                # has no stop_reason; it is the trace evidence of the failed provider call.
                category = "provider" if isinstance(exc, ProviderError) else "unexpected"
                self._emit_error(exc, category, turn, step, step_id, purpose="summarize")
                raise
            latency = resp.latency_ms or int((time.perf_counter() - started) * 1000)
            usages.append(resp.usage or Usage())
            total = resp.usage.total_tokens if resp.usage else 0
            self.writer.emit(
                "llm_call",
                turn=turn,
                step=step,
                parent_step_id=step_id,
                model=resp.model or self.model or getattr(self.provider, "model", None),
                llm_latency_ms=latency,
                llm_request_digest=digest({"messages": messages}),
                llm_response_digest=digest({"content": resp.content}),
                budgets=self.writer.budgets.add(total, latency),
                metadata={
                    "provider": self.provider_name,
                    "purpose": "summarize",
                    "usage": (resp.usage or Usage()).to_dict(),
                    "latency_ms": latency,
                    "streamed": resp.streamed,
                },
            )
            return resp.content or ""

        return summarize

    # -- history -------------------------------------------------------------------------------
    def _append(self, message: dict[str, Any], turn: int) -> None:
        self.history.append(message)
        self._message_turns.append(turn)

    def _memory_messages(self, turn: int) -> list[dict[str, Any]] | None:
        if turn < self._first_turn_in_memory:
            return None
        found = [
            copy.deepcopy(m) for m, t in zip(self.history, self._message_turns, strict=True) if t == turn
        ]
        return found or None

    def _trace_messages(self, turn: int) -> list[dict[str, Any]] | None:
        path = self.runtime.trace_file(self.run_id)
        if path is None or not path.exists():
            return None
        # JsonlFileSink is line-buffered, so the file already holds every event written. A fresh reader
        # every time: the file grows during the session.
        return TraceReader(path).messages_for_turn(self.run_id, turn, agent=self.agent)

    # -- trace events --------------------------------------------------------------------------
    def _model_name(self, resp: ProviderResponse | None = None) -> str | None:
        if resp is not None and resp.model:
            return resp.model
        return self.model or getattr(self.provider, "model", None)

    def _emit_decision(self, decision: Any, turn: int, step: int, step_id: str) -> None:
        if not self.writer.enabled:
            return
        self.writer.emit(
            "context_decision", turn=turn, step=step, parent_step_id=step_id, metadata=decision.to_metadata()
        )

    def _emit_snapshot(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: int, step: int, step_id: str
    ) -> None:
        model = self._model_name()
        self.writer.emit(
            "prompt_snapshot",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            model=model,
            metadata={
                "prompt_snapshot": {
                    "turn": turn,
                    "step": step,
                    "model": model,
                    "messages": [_arcana_message(m) for m in messages],
                    "tools": tools,
                    "response_format": None,
                    "budget_snapshot": self.writer.budgets.snapshot(),
                }
            },
        )

    def _emit_turn(
        self,
        resp: ProviderResponse,
        new_messages: list[dict[str, Any]],
        turn: int,
        step: int,
        step_id: str,
        latency: int,
        *,
        exhausted: bool,
    ) -> None:
        text = resp.content
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in resp.tool_calls]
        u = resp.usage or Usage()
        if calls:
            assessment = {
                "completed": False,
                "failed": False,
                "needs_clarification": False,
                "answer": None,
                "completion_reason": None,
                "confidence": 0.0,
            }
        elif not text:
            assessment = {
                "completed": False,
                "failed": True,
                "needs_clarification": False,
                "answer": None,
                "completion_reason": "empty_response",
                "confidence": 0.0,
            }
        else:
            natural = resp.finish_reason in (None, "stop")
            assessment = {
                "completed": True,
                "failed": False,
                "needs_clarification": False,
                "answer": text,
                "completion_reason": "natural_stop" if natural else resp.finish_reason,
                "confidence": 0.85 if natural else 0.5,
            }
        stop: dict[str, Any] = {}
        if exhausted:
            stop = {
                "stop_reason": "max_steps",
                "stop_detail": f"max_steps_per_turn ({self.config.max_steps_per_turn}) exhausted in turn {turn}",
            }
        self.writer.emit(
            "turn",
            turn=turn,
            step=step,
            step_id=step_id,
            parent_step_id=self._spine,
            model=self._model_name(resp),
            llm_latency_ms=latency,
            metadata={
                "messages": new_messages,
                "facts": {
                    "assistant_text": text,
                    "tool_calls": calls,
                    "usage": {
                        **u.to_dict(),
                        "cache_creation_input_tokens": None,
                        "cache_read_input_tokens": None,
                        "cached_tokens": None,
                    },
                    "finish_reason": resp.finish_reason,
                    "thinking": None,
                    "provider_metadata": {},
                },
                "assessment": assessment,
                "trace_privacy": {
                    "turn_content": "raw",
                    "contains_raw_content": True,
                    # Our traces carry the messages so a conversation can be rebuilt from them.
                    "reason": "history_rebuildable_from_trace",
                },
            },
            **stop,
        )
        self._spine = step_id

    def _emit_llm_call(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        resp: ProviderResponse,
        turn: int,
        step: int,
        step_id: str,
        latency: int,
    ) -> None:
        total = resp.usage.total_tokens if resp.usage else 0
        budgets = self.writer.budgets.add(total, latency)
        self.writer.emit(
            "llm_call",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            model=self._model_name(resp),
            llm_latency_ms=latency,
            llm_request_digest=digest({"messages": messages, "tools": tools}),
            llm_response_digest=digest(resp.assistant_message()),
            budgets=budgets,
            metadata={
                "provider": self.provider_name,
                "purpose": "chat",
                "usage": (resp.usage or Usage()).to_dict(),
                "latency_ms": latency,
                "streamed": resp.streamed,
                "finish_reason": resp.finish_reason,
            },
        )

    def _emit_primitive(
        self, outcome: PrimitiveOutcome, call_id: str, turn: int, step: int, step_id: str
    ) -> None:
        metadata: dict[str, Any] = {
            "primitive": outcome.primitive,
            "args": outcome.args,
            "result": outcome.result,
            "tool_call_id": call_id,
        }
        if outcome.tokens is not None:
            metadata["tokens"] = outcome.tokens
        if outcome.raw_arguments is not None:
            metadata["raw_arguments"] = outcome.raw_arguments
        self.writer.emit(
            "cognitive_primitive", turn=turn, step=step, parent_step_id=step_id, metadata=metadata
        )

    def _emit_tool_call(
        self, t: Tool, call_id: str, arguments: str, out: ToolOutcome, turn: int, step: int, step_id: str
    ) -> None:
        args = _loads_or_raw(arguments)
        self.writer.emit(
            "tool_call",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            tool_call={
                "name": t.name,
                "args_digest": digest(args),
                "idempotency_key": None,
                "result_digest": digest(out.content),
                "error": out.error,
                "error_category": out.error_category,
                "duration_ms": out.duration_ms,
                "side_effect": t.side_effect,
            },
            metadata={"tool_call_id": call_id, "arguments": args, "result": out.content},
        )

    def _emit_stop(self, stop: tuple[str, str], turn: int, step: int) -> None:
        reason, detail = stop
        self.writer.emit(
            "state_change",
            turn=turn,
            step=step,
            parent_step_id=self._spine,
            stop_reason=reason,
            stop_detail=detail[:500],
            metadata={"stopped": reason, "detail": detail[:500]},
        )

    def _emit_provider_error(self, exc: BaseException, turn: int, step: int, step_id: str) -> None:
        category = "provider" if isinstance(exc, ProviderError) else "unexpected"
        self._emit_error(exc, category, turn, step, step_id)

    def _emit_error(
        self,
        exc: BaseException,
        category: str,
        turn: int,
        step: int,
        step_id: str,
        *,
        purpose: str | None = None,
    ) -> None:
        """An `error` event. With `purpose` (a summarizer call the builder recovers from) the turn
        does not stop, so the event carries `metadata.purpose` and no `stop_reason`."""
        metadata: dict[str, Any] = {
            "error": type(exc).__name__,
            "message": str(exc),
            "error_category": category,
            "provider": self.provider_name,
        }
        if purpose is not None:
            metadata["purpose"] = purpose
        status = getattr(exc, "status_code", None)
        if status is not None:
            metadata["status_code"] = status
        stop = {} if purpose is not None else {"stop_reason": "error", "stop_detail": str(exc)[:500]}
        self.writer.emit(
            "error",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            model=self._model_name(),
            metadata=metadata,
            **stop,
        )

    # -- state ---------------------------------------------------------------------------------
    @classmethod
    def _from_state(
        cls,
        runtime: Runtime,
        state: Mapping[str, Any],
        *,
        system: str | None,
        provider: str | None,
        model: str | None,
        cognitive_primitives: Sequence[str] | None,
        tools: Mapping[str, Tool],
        writer: TraceWriter | None,
        pool: AgentPool | None = None,
        agent: str | None = None,
    ) -> ChatSession:
        _check_state(state, STATE_FORMAT)
        saved_system = state["system"]
        if system is not None and system != saved_system:
            raise ConfigError(
                "state was exported with a different system prompt; pass system=None to resume it"
            )
        prov = provider if provider is not None else state.get("provider")
        if prov not in runtime.providers:
            prov = runtime._provider_name(provider)
        primitives = normalize_primitives(
            state.get("cognitive_primitives") if cognitive_primitives is None else cognitive_primitives
        )
        _check_tool_names(tools, primitives, "chat(state=...)")
        if writer is None:
            writer = runtime._writer(str(state["run_id"]))
        session = cls(
            runtime,
            system=saved_system,
            provider=prov,
            model=model if model is not None else state.get("model"),
            tools=tools,
            primitives=primitives,
            writer=writer,
            agent=agent,
            pool=pool,
        )
        history = state.get("history") or []
        turns = state.get("message_turns") or []
        if len(history) != len(turns) or not history or history[0].get("role") != "system":
            raise ConfigError("state is damaged: history and message_turns do not match")
        session.history = copy.deepcopy(list(history))
        session._message_turns = [int(t) for t in turns]
        session._first_turn_in_memory = int(state.get("first_turn_in_memory", 1))
        session.turn = int(state.get("turn", 0))
        session._spine = state.get("spine")
        session.cognitive.restore_state({"pins": state.get("pins"), "recall_log": state.get("recall_log")})
        if pool is None:
            writer.budgets.restore(state.get("budgets") or {})
        cursor = state.get("provider_cursor")
        restore = getattr(session.provider, "restore_state", None)
        if cursor is not None and callable(restore):
            restore(cursor)
        return session


def _check_state(state: Any, fmt: str) -> None:
    if not isinstance(state, Mapping):
        raise ConfigError(f"state must be a dict from export_state(), got {type(state).__name__}")
    if state.get("format") != fmt:
        raise ConfigError(f"state is not a {fmt!r} export (format={state.get('format')!r})")
    if state.get("version") != STATE_VERSION:
        raise ConfigError(
            f"unsupported state version {state.get('version')!r}; this runtime reads {STATE_VERSION}"
        )
    if not isinstance(state.get("run_id"), str):
        raise ConfigError("state has no run_id")
    if fmt == STATE_FORMAT and not isinstance(state.get("system"), str):
        raise ConfigError("state has no system prompt")


def _close_run(sink: Any, run_id: str) -> None:
    for s in _flatten(sink):
        close_run = getattr(s, "close_run", None)
        if callable(close_run):
            close_run(run_id)
        else:
            flush = getattr(s, "flush", None)
            if callable(flush):
                flush()


def _loads_or_raw(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments
    return value


def _arcana_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """A message in Arcana's prompt-snapshot shape (all keys present, tool calls flattened)."""
    calls = m.get("tool_calls")
    return {
        "role": m.get("role"),
        "content": m.get("content"),
        "name": m.get("name"),
        "tool_call_id": m.get("tool_call_id"),
        "tool_calls": [
            {
                "id": c.get("id"),
                "name": c.get("function", {}).get("name"),
                "arguments": c.get("function", {}).get("arguments"),
            }
            for c in calls
        ]
        if calls
        else None,
        "cache_control": None,
    }


class AgentPool:
    """Named agents sharing one run (one `run_id`, one trace file). Each agent is a `ChatSession` with
    its own history, turns, pins and recall log; every event it writes carries
    `metadata.source_agent = name` (tool calls included).

    Primitives per agent: `pool.add(..., cognitive_primitives=[...])` if given (`[]` opts out), else
    the pool default from `collaborate(cognitive_primitives=...)`, else the config's."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        cognitive_primitives: Sequence[str] | None = None,
        state: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> None:
        self.runtime = runtime
        if cognitive_primitives is None and state is not None:
            # A resumed pool keeps the default it was created with unless told otherwise.
            cognitive_primitives = state.get("default_primitives")
        self.default_primitives: tuple[str, ...] | None = (
            None if cognitive_primitives is None else normalize_primitives(cognitive_primitives)
        )
        self._saved: dict[str, Any] = {}
        if state is not None:
            _check_state(state, POOL_STATE_FORMAT)
            self._saved = dict(state.get("agents") or {})
            run_id = state["run_id"]
        else:
            run_id = _check_run_id(run_id)
        self.run_id: str = run_id
        self.writer = runtime._writer(run_id)
        if state is not None:
            self.writer.budgets.restore(state.get("budgets") or {})
        self.agents: dict[str, ChatSession] = {}

    def add(
        self,
        name: str,
        *,
        system: str | None = None,
        tools: Sequence[Any] | None = None,
        provider: str | None = None,
        model: str | None = None,
        cognitive_primitives: Sequence[str] | None = None,
    ) -> ChatSession:
        """Add agent `name` (its session). Duplicate names and tools named like one of the agent's
        enabled primitives raise `ConfigError`. `tools=None` gives the runtime's tools. In a pool
        resumed from `export_state()`, an agent of that state resumes with its own primitives unless
        `cognitive_primitives` is given."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("pool agent names must be non-empty strings")
        if name in self.agents:
            raise ConfigError(f"the pool already has an agent named {name!r}")
        saved = self._saved.get(name)
        if cognitive_primitives is not None:
            primitives = normalize_primitives(cognitive_primitives, where=f"pool.add({name!r})")
        elif saved is not None:
            # A resumed agent keeps its own primitives (its pins may need `unpin`).
            primitives = normalize_primitives(saved.get("cognitive_primitives"))
        elif self.default_primitives is not None:
            primitives = self.default_primitives
        else:
            primitives = self.runtime.config.cognitive_primitives
        tool_map = self.runtime.tools if tools is None else build_tools(tools)
        _check_tool_names(tool_map, primitives, f"pool.add({name!r})")
        writer = self.writer.for_agent(name)
        if saved is not None:
            agent = ChatSession._from_state(
                self.runtime,
                saved,
                system=system,
                provider=provider,
                model=model,
                cognitive_primitives=primitives,
                tools=tool_map,
                writer=writer,
                pool=self,
                agent=name,
            )
        else:
            agent = ChatSession(
                self.runtime,
                system=DEFAULT_SYSTEM_PROMPT if system is None else system,
                provider=self.runtime._provider_name(provider),
                model=model,
                tools=tool_map,
                primitives=primitives,
                writer=writer,
                agent=name,
                pool=self,
            )
        self.agents[name] = agent
        return agent

    def __getitem__(self, name: str) -> ChatSession:
        return self.agents[name]

    def export_state(self, *, include_history: bool = True) -> dict[str, Any]:
        """Every agent's state plus the pool's run id and budget totals (JSON-safe)."""
        return {
            "format": POOL_STATE_FORMAT,
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "budgets": self.writer.budgets.to_dict(),
            "default_primitives": None if self.default_primitives is None else list(self.default_primitives),
            "agents": {n: a.export_state(include_history=include_history) for n, a in self.agents.items()},
        }

    async def aclose(self) -> None:
        for agent in self.agents.values():
            await agent.aclose()
        _close_run(self.runtime.sink, self.run_id)

    async def __aenter__(self) -> AgentPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
