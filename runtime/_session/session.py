"""`ChatSession` (one conversation and its step loop) and `Reply` (what one `send()` returns)."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._config import ALL_PRIMITIVE_TOOL_NAMES
from .._json_text import message_texts
from .._primitives import CognitiveHandler
from .._provider_types import Provider, ProviderResponse, Usage
from .._tokens import REPLY_PRIMING_TOKENS, CalibratedCounter
from .._tools import Tool, run_tool
from .._trace_reader import TraceReader
from .._trace_writer import TraceWriter, digest
from .._working_set import SUMMARY_MAX_TOKENS, WorkingSet, WorkingSetBuilder
from ..errors import ConfigError, ContextOverflowError, ProviderError
from ..facts import SCORE_EVENT, score_problem
from .common import close_run
from .events import SessionEvents, loads_or_raw
from .state import SessionState, encode_session

if TYPE_CHECKING:
    from .runtime import Runtime


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


class ChatSession(SessionEvents):
    """One conversation: its history, turn counter, pins and recall log. Made by `Runtime.chat()` or
    `AgentPool.add()`; use `send()`. Not safe to `send()` twice at once (calls are serialized).

    `owns_run` is False for a pool's agent: the pool, not the agent, closes the run's trace. `state`
    (a decoded `export_state()`, resolved by the runtime) is where a resumed session continues from."""

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
        owns_run: bool = True,
        state: SessionState | None = None,
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
        self._owns_run = owns_run
        self.history: list[dict[str, Any]] = [{"role": "system", "content": system}]
        # The 1-based turn of each history message (0 for the system prompt), for recall.
        self._message_turns: list[int] = [0]
        # Turns before this one are not in `history` (a state exported without history); recall reads
        # them from the trace.
        self._first_turn_in_memory = 1
        self.turn = 0
        self._in_turn = False
        self._spine: str | None = None  # step_id of the last `turn` event: the next one's parent
        # Calibrated (estimated) counts for a model whose tokenizer tiktoken does not have.
        self.counter = runtime.counter_for(self.provider, model)
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
        if state is not None:
            self._restore(state)

    # -- public --------------------------------------------------------------------------------
    @property
    def system(self) -> str:
        prompt: str = self.history[0]["content"]  # checked to be a string in __init__
        return prompt

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

    def score(
        self,
        name: str,
        value: bool | int | float | str,
        *,
        comment: str = "",
        target: str = "run",
        turn: int | None = None,
        step: int | None = None,
    ) -> str | None:
        """Give this run (`target="run"`), one of its turns (`"turn"`: `turn`, else the last one) or
        one of its steps (`"step"`: `step` of `turn`) a score: `name` is one of the project's score
        configs (`helpfulness`), `value` a number, true / false, or a category, `comment` optional.

        Written as a `score` event in the trace (docs/trace-format.md, "Score events"), so it travels
        with the run's other events — to its JSONL file and through the HTTP sink — and the server
        makes it a score of the run. Returns the event's id (None when no sink records the trace).
        Raises `ValueError` for a malformed score, a turn not run yet, or while a turn is running
        (score it after `send()` returns)."""
        if self._closed:
            raise ConfigError("this session is closed")
        if self._in_turn:
            raise ValueError("score() cannot run while a turn is in progress; score after send() returns")
        if target != "run" and turn is None:
            turn = self.turn or None
        if target == "run":
            at_turn, at_step = None, None
        else:
            at_turn, at_step = turn, (step if target == "step" else None)
        if target in ("turn", "step") and isinstance(at_turn, int) and not 1 <= at_turn <= self.turn:
            raise ValueError(f"turn {at_turn} has not run (this session has run {self.turn})")
        if target == "run" and (turn is not None or step is not None):
            raise ValueError("a run's score names no turn or step; use target='turn' or 'step'")
        score = {"name": name, "value": value, "comment": comment, "target": target}
        problem = score_problem(score, at_turn, at_step)
        if problem is not None:
            raise ValueError(f"score {problem[0]}: {problem[1]}")
        event = self.writer.emit(SCORE_EVENT, turn=at_turn, step=at_step, metadata={"score": score})
        return event.step_id if event is not None else None

    def export_state(self, *, include_history: bool = True) -> dict[str, Any]:
        """Everything needed to continue this conversation elsewhere, as a JSON-safe dict.

        With `include_history=False` only the system prompt is kept: the model then starts from a
        fresh context, and `recall` reads earlier turns from the session's trace."""
        if self._in_turn:
            raise ConfigError("export_state() cannot run while a turn is in progress")
        export = getattr(self.provider, "export_state", None)
        cursor = export() if callable(export) else None
        if include_history:
            history, turns, first = self.history, self._message_turns, self._first_turn_in_memory
        else:
            history, turns, first = self.history[:1], [0], self.turn + 1
        calibration = self.counter.to_dict() if isinstance(self.counter, CalibratedCounter) else None
        return encode_session(
            SessionState(
                run_id=self.run_id,
                system=self.system,
                history=history,
                message_turns=turns,
                agent=self.agent,
                provider=self.provider_name,
                model=self.model,
                cognitive_primitives=list(self.cognitive.enabled),
                turn=self.turn,
                spine=self._spine,
                include_history=include_history,
                first_turn_in_memory=first,
                pins=self.cognitive.pins.to_list(),
                recall_log=[r.to_dict() for r in self.cognitive.recall_log],
                budgets=self.writer.budgets.to_dict(),
                provider_cursor=cursor,
                token_calibration=calibration,
            )
        )

    async def aclose(self) -> None:
        """Flush the trace; a plain chat also closes its trace file (a pool closes it on exit)."""
        self._closed = True
        if self._owns_run:
            close_run(self.runtime.sink, self.run_id)

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
            # Each message is keyed and looked up once for both the request body and the request
            # digest (a provider that does not take them gets the messages alone).
            keyed = getattr(self.provider, "takes_message_texts", False) is True
            texts = message_texts(ws.messages, ws.message_texts) if keyed else None
            started = time.perf_counter()
            try:
                if texts is not None:
                    provider: Any = self.provider  # its `complete()` also takes `message_texts`
                    resp = await provider.complete(
                        ws.messages, tools=tools_arg, model=self.model, message_texts=texts
                    )
                else:
                    resp = await self.provider.complete(ws.messages, tools=tools_arg, model=self.model)
            except Exception as exc:
                self._emit_provider_error(exc, new_messages, turn, step, step_id)
                raise
            latency = resp.latency_ms or int((time.perf_counter() - started) * 1000)
            usage = _add_usage(usage, resp.usage)
            self._calibrate(ws, tools, resp)
            assistant = resp.assistant_message()
            self._append(assistant, turn)
            new_messages.append(assistant)
            last = step == max_steps and bool(resp.tool_calls)
            self._emit_turn(resp, new_messages, turn, step, step_id, latency, exhausted=last)
            self._emit_llm_call(ws.messages, tools_arg, resp, turn, step, step_id, latency, texts)
            new_messages = []
            if not resp.tool_calls:
                outcome = OUTCOME_ANSWERED if resp.content else OUTCOME_EMPTY
                return self._reply(resp.content or "", turn, step, calls_made, usage, outcome)
            await self._dispatch(resp, turn, step, step_id, calls_made)
        return self._reply(None, turn, max_steps, calls_made, usage, OUTCOME_MAX_STEPS)

    def _calibrate(self, ws: WorkingSet, tools: list[dict[str, Any]], resp: Any) -> None:
        """Feed a calibrated counter the provider's prompt-token figure for what was just sent
        (`ws.messages`, counted by the base counter; the builder remembers each message's count)."""
        if (
            not isinstance(self.counter, CalibratedCounter)
            or resp.usage is None
            or not resp.usage.prompt_tokens
        ):
            return
        base = self.counter.base
        counted = self.builder.base_tokens(ws, base) + base.count_tools(tools)
        self.counter.observe(counted=counted, reported=resp.usage.prompt_tokens)

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
                "arguments": loads_or_raw(call.arguments),
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
                "arguments": loads_or_raw(arguments),
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

    # -- state ----------------------------------------------------------------------------------
    def _restore(self, state: SessionState) -> None:
        """Continue from a decoded `state`: its history, turn counter, pins, recall log, token
        calibration and provider cursor (the runtime chose the provider, primitives and writer)."""
        self.history = state.history
        self._message_turns = list(state.message_turns)
        self._first_turn_in_memory = state.first_turn_in_memory
        self.turn = state.turn
        self._spine = state.spine
        self.cognitive.restore_state({"pins": state.pins, "recall_log": state.recall_log})
        if state.token_calibration and isinstance(self.counter, CalibratedCounter):
            self.counter.restore(state.token_calibration)
        restore = getattr(self.provider, "restore_state", None)
        if state.provider_cursor is not None and callable(restore):
            restore(state.provider_cursor)
