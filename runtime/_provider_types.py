"""What every model provider takes and returns.

Providers speak OpenAI chat-completions messages (plain dicts: `role`, `content`, `tool_calls`,
`tool_call_id`, `name`) and OpenAI function-tool schemas. The session loop only sees this module's
types, so a scripted provider and a real HTTP endpoint are interchangeable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for. `arguments` is the raw JSON string the model sent (it may be
    invalid JSON: the caller decides what to do with it)."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ProviderResponse:
    """One completed model call."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    model: str | None = None
    latency_ms: int = 0
    streamed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def assistant_message(self) -> dict[str, Any]:
        """The assistant message to append to the history, in OpenAI shape."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        return msg


@runtime_checkable
class Provider(Protocol):
    """A chat-completions model. `name` is the key it was configured under; `model` its default model."""

    name: str
    model: str

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> ProviderResponse: ...

    async def aclose(self) -> None: ...
