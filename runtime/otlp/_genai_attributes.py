"""The GenAI semantic conventions' span attributes: the messages (`gen_ai.input.messages`,
`gen_ai.output.messages`, and the older single attributes `gen_ai.prompt` / `gen_ai.completion`),
system instructions, tool definitions, models, provider and response, request parameters, usage
and the conversation. Where a field has other names in OpenInference or OpenLLMetry
(`llm.model_name`, `llm.token_count.*`, `llm.invocation_parameters`, `session.id`, ...), they are
read here too, after the GenAI name, so that one field is read in one place.

Each reader takes what it reads out of `rest` (the span's attributes not mapped yet)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._parts import messages_value, parts_value
from ._types import Message, MessagesFormat, Part, RunKeySource, Usage
from ._values import first_str, json_or_text, str_or_none

_USAGE_KEYS: dict[str, str] = {
    "gen_ai.usage.input_tokens": "input_tokens",
    "gen_ai.usage.prompt_tokens": "input_tokens",
    "llm.token_count.prompt": "input_tokens",
    "gen_ai.usage.output_tokens": "output_tokens",
    "gen_ai.usage.completion_tokens": "output_tokens",
    "llm.token_count.completion": "output_tokens",
    "gen_ai.usage.total_tokens": "total_tokens",
    "llm.usage.total_tokens": "total_tokens",
    "llm.token_count.total": "total_tokens",
    "gen_ai.usage.cache_read.input_tokens": "cached_input_tokens",
    "gen_ai.usage.cache_read_input_tokens": "cached_input_tokens",
    "gen_ai.usage.cached_tokens": "cached_input_tokens",
    "llm.token_count.prompt_details.cache_read": "cached_input_tokens",
    "gen_ai.usage.cache_creation.input_tokens": "cache_creation_input_tokens",
    "gen_ai.usage.cache_creation_input_tokens": "cache_creation_input_tokens",
    "llm.token_count.prompt_details.cache_write": "cache_creation_input_tokens",
    "gen_ai.usage.reasoning.output_tokens": "reasoning_tokens",
    "gen_ai.usage.reasoning_tokens": "reasoning_tokens",
    "llm.token_count.completion_details.reasoning": "reasoning_tokens",
}


def has_attribute_messages(rest: dict[str, Any]) -> bool:
    return "gen_ai.input.messages" in rest or "gen_ai.output.messages" in rest


def attribute_messages(
    rest: dict[str, Any], unparsed: list[str]
) -> tuple[list[Message] | None, list[Message] | None]:
    """`gen_ai.input.messages` / `gen_ai.output.messages` (JSON, the parts form): input, output."""
    input_messages: list[Message] | None = None
    output_messages: list[Message] | None = None
    if "gen_ai.input.messages" in rest:
        input_messages = messages_value(
            rest.pop("gen_ai.input.messages"), "user", "gen_ai.input.messages", unparsed
        )
    if "gen_ai.output.messages" in rest:
        output_messages = messages_value(
            rest.pop("gen_ai.output.messages"), "assistant", "gen_ai.output.messages", unparsed
        )
    return input_messages, output_messages


def single_attribute_messages(
    rest: dict[str, Any], unparsed: list[str]
) -> tuple[MessagesFormat | None, list[Message] | None, list[Message] | None]:
    """The older single-attribute forms: a JSON list of messages in `gen_ai.prompt` /
    `gen_ai.completion` (a number or a boolean there is not one, and stays in `rest`)."""
    messages_format: MessagesFormat | None = None
    input_messages: list[Message] | None = None
    output_messages: list[Message] | None = None
    if "gen_ai.prompt" in rest and not isinstance(rest["gen_ai.prompt"], int | float | bool):
        messages_format = "gen_ai.prompt"
        input_messages = messages_value(rest.pop("gen_ai.prompt"), "user", "gen_ai.prompt", unparsed)
    if "gen_ai.completion" in rest and not isinstance(rest["gen_ai.completion"], int | float | bool):
        messages_format = "gen_ai.prompt"
        output_messages = messages_value(
            rest.pop("gen_ai.completion"), "assistant", "gen_ai.completion", unparsed
        )
    return messages_format, input_messages, output_messages


def system_instructions(rest: dict[str, Any], unparsed: list[str]) -> list[Part] | None:
    """`gen_ai.system_instructions`: a JSON list of parts, or a plain text."""
    if "gen_ai.system_instructions" not in rest:
        return None
    return parts_value(rest.pop("gen_ai.system_instructions"), "gen_ai.system_instructions", unparsed)


def tool_definitions(rest: dict[str, Any], unparsed: list[str]) -> list[Any] | None:
    """`gen_ai.tool.definitions`: a JSON list (anything else becomes a list of that one value)."""
    if "gen_ai.tool.definitions" not in rest:
        return None
    parsed = json_or_text(rest.pop("gen_ai.tool.definitions"), "gen_ai.tool.definitions", unparsed)
    return parsed if isinstance(parsed, list) else [parsed]


class ModelInfo(NamedTuple):
    """The model, provider and response of a model call, and what it was asked with."""

    request_model: str | None
    response_model: str | None
    model: str | None  # the response's model, else the request's, else OpenInference's llm.model_name
    provider: str | None
    response_id: str | None
    finish_reasons: list[str] | None
    request_parameters: dict[str, Any]


def model_info(rest: dict[str, Any]) -> ModelInfo:
    pop = rest.pop
    request_model = str_or_none(pop("gen_ai.request.model", None))
    response_model = str_or_none(pop("gen_ai.response.model", None))
    llm_model = str_or_none(pop("llm.model_name", None))
    return ModelInfo(
        request_model,
        response_model,
        response_model or request_model or llm_model,
        first_str(rest, ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")),
        str_or_none(pop("gen_ai.response.id", None)),
        _finish_reasons(rest),
        _request_parameters(rest),
    )


def _finish_reasons(rest: dict[str, Any]) -> list[str] | None:
    finish_reasons: list[str] | None = None
    reasons = rest.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and all(type(r) is str for r in reasons):
        finish_reasons = rest.pop("gen_ai.response.finish_reasons")
    elif type(reasons) is str:
        rest.pop("gen_ai.response.finish_reasons")
        finish_reasons = [reasons]
    if finish_reasons is None and type(rest.get("llm.finish_reason")) is str:
        finish_reasons = [rest.pop("llm.finish_reason")]
    return finish_reasons


def _request_parameters(rest: dict[str, Any]) -> dict[str, Any]:
    """`gen_ai.request.*` (prefix dropped), then the keys of OpenInference's
    `llm.invocation_parameters` (JSON) that those did not give."""
    request_parameters: dict[str, Any] = {}
    for key in [k for k in rest if k.startswith("gen_ai.request.")]:
        request_parameters[key[15:]] = rest.pop(key)
    if "llm.invocation_parameters" in rest:
        params = json_or_text(rest["llm.invocation_parameters"], "llm.invocation_parameters", None)
        if isinstance(params, dict):
            rest.pop("llm.invocation_parameters")
            for key, value in params.items():
                request_parameters.setdefault(key, value)
    return request_parameters


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is str and value.isascii() and value.isdigit() and len(value) < 20:
        return int(value)
    return None


def usage(rest: dict[str, Any]) -> Usage | None:
    """Token counts under any of their names (the first name of a count present wins); a value that
    is not a count stays in `rest`."""
    counts: dict[str, int | None] = {}
    for key in [k for k in rest if k in _USAGE_KEYS]:
        n = _int(rest[key])
        if n is None:
            continue  # not a count: kept in other_attributes
        del rest[key]
        counts.setdefault(_USAGE_KEYS[key], n)
    if not counts:
        return None
    return {
        "input_tokens": counts.get("input_tokens"),
        "output_tokens": counts.get("output_tokens"),
        "total_tokens": counts.get("total_tokens"),
        "cached_input_tokens": counts.get("cached_input_tokens"),
        "cache_creation_input_tokens": counts.get("cache_creation_input_tokens"),
        "reasoning_tokens": counts.get("reasoning_tokens"),
    }


def conversation(rest: dict[str, Any], trace_id: str) -> tuple[str, RunKeySource, str | None]:
    """(run key, its source, conversation id): `gen_ai.conversation.id`, else OpenInference's
    `session.id` (which then is the conversation id too), else the trace id (no conversation)."""
    conversation_id = str_or_none(rest.pop("gen_ai.conversation.id", None))
    session_id = str_or_none(rest.pop("session.id", None))
    if conversation_id:
        return conversation_id, "gen_ai.conversation.id", conversation_id
    if session_id:
        return session_id, "session.id", session_id
    return trace_id, "trace_id", None
