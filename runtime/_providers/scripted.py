"""The scripted offline model: `ScriptedProvider` answers from a list of steps, in order."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._provider_types import ProviderResponse, ToolCall, Usage
from ..errors import (
    ConfigError,
)

# --------------------------------------------------------------------------------------------------
# Scripted provider
# --------------------------------------------------------------------------------------------------

#: The text a `ScriptedProvider` answers once its script has no usable step left.
DEFAULT_CLOSING_TEXT = "(script finished)"

_STEP_KEYS = frozenset({"content", "tool_calls", "when"})


@dataclass(frozen=True)
class _ScriptStep:
    content: str | None
    # (name, raw JSON arguments) pairs; ids are minted when the step is used.
    tool_calls: tuple[tuple[str, str], ...]
    when: str | None

    def to_json_safe(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "tool_calls": [list(tc) for tc in self.tool_calls],
            "when": self.when,
        }


class ScriptedProvider:
    """A deterministic offline model that answers from a script. For demos and tests.

        >>> p = ScriptedProvider([
        ...     {"content": None, "tool_calls": [{"name": "pin", "arguments": {"content": "Ada"}}],
        ...      "when": "remember"},
        ...     "Noted.",
        ... ])

    A step is either a string (the assistant's text) or a dict
    `{"content": str | None, "tool_calls": [{"name": str, "arguments": dict | str}], "when": str | None}`
    (a string `arguments` is sent as-is, so a test can feed invalid JSON). A step needs content or at
    least one tool call.

    **Which step answers a call.** On every `complete()` call the provider takes the *first step in
    script order that has not been used yet and whose `when` is None or is a substring
    (case-sensitive) of the last `user` message's text*; that step is then marked used and never
    answers again. Unused steps whose `when` does not match stay available for later calls, so a
    conditional step may be skipped now and used later. When no step qualifies (all used, or every
    remaining one has a non-matching `when`) the answer is `closing_text`, with no tool calls. The
    "last user message" is the last message with `role == "user"` in the request (text parts of a
    list content are joined with newlines); with none, only steps without `when` qualify.

    Tool-call ids are `call_1`, `call_2`, … counted over the provider's whole life (the counter is
    part of `export_state()`). `finish_reason` is `"tool_calls"` when the step has tool calls, else
    `"stop"`.

    **Usage is approximate but deterministic**: whitespace-separated words, not tokenizer tokens.
    `prompt_tokens` counts the words of every message's text content plus the name and arguments of
    each tool call in the request; `completion_tokens` counts the words of the answer's content plus
    its tool-call names and arguments.

    Every request is recorded in `self.requests` as `{"messages", "tools", "model"}` (deep copies), so
    tests and demos can see what the model saw. The cursor (which steps were used, the tool-call
    counter) is saved by `export_state()` and put back by `restore_state()`.
    """

    def __init__(
        self,
        steps: Sequence[str | Mapping[str, Any]],
        *,
        name: str = "scripted",
        model: str = "scripted-1",
        closing_text: str = DEFAULT_CLOSING_TEXT,
        delay: float = 0.0,
    ) -> None:
        if isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
            raise ConfigError("ScriptedProvider steps must be a list of strings or step dicts")
        if not delay >= 0:
            raise ConfigError("ScriptedProvider delay must be a number of seconds >= 0")
        self.name = name
        # Seconds each answer takes, like a real model's latency: a server playing a demo paces it so
        # a person can watch it unfold step by step (0: answer at once, as tests want).
        self.delay = float(delay)
        self.model = model
        self.closing_text = closing_text
        self.steps: tuple[_ScriptStep, ...] = tuple(_parse_step(i, s) for i, s in enumerate(steps))
        self.requests: list[dict[str, Any]] = []
        self._used: list[bool] = [False] * len(self.steps)
        self._next_call_id = 1

    def __repr__(self) -> str:
        return f"ScriptedProvider(name={self.name!r}, model={self.model!r}, steps={len(self.steps)}, remaining={self.remaining})"

    @property
    def remaining(self) -> int:
        """How many steps have not answered yet."""
        return self._used.count(False)

    @property
    def exhausted(self) -> bool:
        """True once every step has answered."""
        return self.remaining == 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> ProviderResponse:
        """Answer with the next qualifying step (see the class docstring for the rule)."""
        started = time.perf_counter()
        used_model = model or self.model
        self.requests.append(
            {"messages": copy.deepcopy(list(messages)), "tools": copy.deepcopy(tools), "model": used_model}
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        last_user = _last_user_text(messages)
        step = self._take_step(last_user)
        if step is None:
            content: str | None = self.closing_text
            calls: tuple[ToolCall, ...] = ()
        else:
            content = step.content
            calls = tuple(self._mint_call(name, args) for name, args in step.tool_calls)
        prompt_words = sum(_message_words(m) for m in messages)
        completion_words = _count_words(content) + sum(
            _count_words(c.name) + _count_words(c.arguments) for c in calls
        )
        return ProviderResponse(
            content=content,
            tool_calls=calls,
            usage=Usage(prompt_words, completion_words, prompt_words + completion_words),
            finish_reason="tool_calls" if calls else "stop",
            model=used_model,
            latency_ms=int((time.perf_counter() - started) * 1000),
            extra={"script_step": None if step is None else self.steps.index(step)},
        )

    async def aclose(self) -> None:
        """Nothing to release; present for the `Provider` protocol."""

    def export_state(self) -> dict[str, Any]:
        """The cursor as a JSON-safe dict: used step indices, the next tool-call number, and a digest
        of the script so `restore_state()` can refuse a state taken from a different script."""
        return {
            "used": [i for i, u in enumerate(self._used) if u],
            "next_call_id": self._next_call_id,
            "script_digest": self.script_digest,
        }

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Put back a cursor from `export_state()`. Raises `ConfigError` if it does not fit this script."""
        try:
            used = [int(i) for i in state["used"]]
            next_call_id = int(state["next_call_id"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                "ScriptedProvider state must have 'used' (list of ints) and 'next_call_id'"
            ) from None
        digest = state.get("script_digest")
        if digest is not None and digest != self.script_digest:
            raise ConfigError("ScriptedProvider state was exported from a different script")
        if any(i < 0 or i >= len(self.steps) for i in used) or next_call_id < 1:
            raise ConfigError("ScriptedProvider state does not fit this script")
        self._used = [i in set(used) for i in range(len(self.steps))]
        self._next_call_id = next_call_id

    @property
    def script_digest(self) -> str:
        """A short SHA-256 of the normalized script (steps and closing text)."""
        blob = json.dumps(
            {"steps": [s.to_json_safe() for s in self.steps], "closing_text": self.closing_text},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def _take_step(self, last_user: str | None) -> _ScriptStep | None:
        for i, step in enumerate(self.steps):
            if self._used[i]:
                continue
            if step.when is None or (last_user is not None and step.when in last_user):
                self._used[i] = True
                return step
        return None

    def _mint_call(self, name: str, arguments: str) -> ToolCall:
        call = ToolCall(id=f"call_{self._next_call_id}", name=name, arguments=arguments)
        self._next_call_id += 1
        return call


def _parse_step(index: int, step: Any) -> _ScriptStep:
    where = f"ScriptedProvider step {index}"
    if isinstance(step, str):
        return _ScriptStep(content=step, tool_calls=(), when=None)
    if not isinstance(step, Mapping):
        raise ConfigError(f"{where}: must be a string or a dict, got {type(step).__name__}")
    unknown = set(step) - _STEP_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (allowed: content, tool_calls, when)")
    content = step.get("content")
    if content is not None and not isinstance(content, str):
        raise ConfigError(f"{where}: 'content' must be a string or None")
    when = step.get("when")
    if when is not None and (not isinstance(when, str) or not when):
        raise ConfigError(f"{where}: 'when' must be a non-empty string or None")
    raw_calls = step.get("tool_calls") or []
    if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, str):
        raise ConfigError(f"{where}: 'tool_calls' must be a list")
    calls: list[tuple[str, str]] = []
    for j, call in enumerate(raw_calls):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
            raise ConfigError(f"{where}: tool call {j} needs a non-empty 'name'")
        args = call.get("arguments", {})
        if isinstance(args, str):
            raw_args = args
        else:
            try:
                raw_args = json.dumps(args, ensure_ascii=False)
            except (TypeError, ValueError):
                raise ConfigError(f"{where}: tool call {j} arguments are not JSON-serializable") from None
        calls.append((call["name"], raw_args))
    if content is None and not calls:
        raise ConfigError(f"{where}: needs 'content' or at least one tool call")
    return _ScriptStep(content=content, tool_calls=tuple(calls), when=when)


def content_text(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return None


def _count_words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _message_words(message: Mapping[str, Any]) -> int:
    words = _count_words(content_text(message.get("content")))
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        words += _count_words(fn.get("name")) + _count_words(fn.get("arguments"))
    return words
