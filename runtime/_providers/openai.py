"""The OpenAI-compatible HTTP provider: JSON and SSE chat completions over httpx, retried with the
shared backoff of `runtime._retry`."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .. import _json_text
from .._json_text import MessageTexts, compact_text, compact_utf8, splice_dumps, splice_dumps_utf8
from .._provider_types import ProviderResponse, ToolCall, Usage
from .._retry import parse_retry_after, retry_delay
from ..errors import (
    ConfigError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderResponseError,
    ProviderTimeout,
)
from .scripted import content_text

logger = logging.getLogger("runtime.providers")
# --------------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP provider
# --------------------------------------------------------------------------------------------------

#: How much of an error body is kept on `ProviderHTTPError.body`.
MAX_ERROR_BODY_CHARS = 2000


@dataclass(frozen=True)
class ProviderTimeouts:
    """Timeouts in seconds for one HTTP attempt (None = wait forever), as httpx understands them.

        >>> ProviderTimeouts()                      # the defaults
        ProviderTimeouts(connect=10.0, read=60.0, write=30.0, pool=10.0)
        >>> ProviderTimeouts.uniform(5.0).read      # the same limit for every phase
        5.0
        >>> ProviderTimeouts(read=300.0).connect    # a slow model, a quick connect
        10.0

    `read` bounds the wait for each chunk of the answer (each SSE line when streaming), not the
    whole answer. The limits apply per attempt; retries start a fresh clock.
    """

    connect: float | None = 10.0
    read: float | None = 60.0
    write: float | None = 30.0
    pool: float | None = 10.0

    def __post_init__(self) -> None:
        for phase in ("connect", "read", "write", "pool"):
            value = getattr(self, phase)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"ProviderTimeouts.{phase} must be a positive number of seconds or None")

    @classmethod
    def uniform(cls, seconds: float | None) -> ProviderTimeouts:
        """The same limit for connect, read, write and pool."""
        return cls(connect=seconds, read=seconds, write=seconds, pool=seconds)

    @classmethod
    def coerce(cls, value: ProviderTimeouts | float | Mapping[str, float | None] | None) -> ProviderTimeouts:
        """Accept a `ProviderTimeouts`, a number (uniform), a dict of phases, or None (no limits)."""
        if isinstance(value, ProviderTimeouts):
            return value
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            return cls.uniform(value)
        if isinstance(value, Mapping):
            unknown = set(value) - {"connect", "read", "write", "pool"}
            if unknown:
                raise ConfigError(
                    f"unknown timeout phases {sorted(unknown)} (allowed: connect, read, write, pool)"
                )
            return cls(**value)
        raise ConfigError(
            f"timeout must be seconds, a dict of phases or ProviderTimeouts, got {type(value).__name__}"
        )

    def to_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


DEFAULT_TIMEOUTS = ProviderTimeouts()


class _RetryableFailure(Exception):
    """One failed attempt worth retrying; `error` is what the caller gets if it was the last one."""

    def __init__(self, error: ProviderError, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


class OpenAICompatibleProvider:
    """A chat-completions endpoint over httpx: OpenAI, DeepSeek, vLLM, llama.cpp, Ollama, a test server.

        >>> p = OpenAICompatibleProvider("local", base_url="http://127.0.0.1:8001/v1", model="m")
        >>> p = OpenAICompatibleProvider("openai", base_url="https://api.openai.com/v1", api_key="sk-...",
        ...                              model="gpt-4o-mini", stream=True, timeout=ProviderTimeouts(read=120))

    `complete()` POSTs to `{base_url}/chat/completions` with `Authorization: Bearer <api_key>` (when a
    key is given). The request body is deterministic for identical inputs: keys in a fixed order
    (`model, messages, tools, temperature, max_tokens, stream, stream_options`), compact separators, no
    ASCII escaping, and `tools` omitted when the list is empty or None (see `request_body()`).

    With `stream=True` the request asks for SSE (`"stream": true`, `"stream_options":
    {"include_usage": true}`); content and tool-call deltas are assembled by index and usage is taken
    from the final chunk. A stream request answered with plain JSON is read as a normal completion.

    Failures: 429 and 5xx answers, connection errors and timeouts are retried up to `max_retries`
    times, waiting `backoff_base * 2**attempt` seconds (capped at `backoff_max`, plus up to 10 %
    jitter), or the server's `Retry-After` (seconds or HTTP date, capped at `max_retry_after`, plus up
    to 50 ms jitter). Then `ProviderHTTPError` (status and truncated body), `ProviderTimeout` or
    `ProviderConnectionError`. Other non-2xx statuses raise `ProviderHTTPError` at once; a 2xx body or
    SSE stream that is not a chat completion raises `ProviderResponseError` at once. The API key is
    never logged, and is masked if an error body echoes it.

    Pass `client=` (an `httpx.AsyncClient`, e.g. with `httpx.MockTransport`) to control transport,
    proxies or pooling; `aclose()` closes only a client this provider created. A created client is
    bound to the event loop of the call that created it; a call from another loop gets a new one.
    """

    #: `complete()` takes `message_texts` (the messages' `MessageTexts`, looked up once per step by
    #: the session and shared with the request digest).
    takes_message_texts = True

    def __init__(
        self,
        name: str,
        *,
        base_url: str,
        api_key: str | None = None,
        model: str,
        timeout: ProviderTimeouts | float | Mapping[str, float | None] | None = DEFAULT_TIMEOUTS,
        max_retries: int = 3,
        stream: bool = False,
        client: httpx.AsyncClient | None = None,
        extra_headers: Mapping[str, str] | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError("provider name must be a non-empty string")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"provider {name!r}: base_url must start with http:// or https://, got {base_url!r}"
            )
        if not isinstance(model, str) or not model:
            raise ConfigError(f"provider {name!r}: a model name is required")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"provider {name!r}: max_retries must be an integer >= 0")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError(f"provider {name!r}: api_key must be a string")
        self.name = name
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.stream = bool(stream)
        self.max_retries = max_retries
        self.timeouts = ProviderTimeouts.coerce(timeout)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        self._api_key = api_key or None
        self._httpx_timeout = self.timeouts.to_httpx()
        self._client = client
        self._owns_client = client is None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._rng = random.Random()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(extra_headers or {})
        self._headers = headers

    def __repr__(self) -> str:
        # No api key here: reprs end up in logs and tracebacks.
        return (
            f"OpenAICompatibleProvider(name={self.name!r}, base_url={self.base_url!r}, "
            f"model={self.model!r}, stream={self.stream})"
        )

    async def __aenter__(self) -> OpenAICompatibleProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def request_body(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        message_texts: Sequence[MessageTexts | None] | None = None,
    ) -> bytes:
        """The exact bytes `complete()` sends for these arguments: `json.dumps` of the body (compact,
        no ASCII escaping), each message's text encoded once per process (`runtime._json_text`).
        `message_texts`, if given, must be `message_texts(messages)` (taken when the caller has them)."""
        body: dict[str, Any] = {"model": model or self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if messages.__class__ is not list or not _json_text.REMEMBER:
            return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        # Each message's text is remembered across steps (the history is sent again at every step).
        if message_texts is None or len(message_texts) != len(messages):
            texts = [compact_text(m) for m in messages]
            return splice_dumps(body, ("messages",), texts).encode("utf-8")
        # Each message's bytes too: the body is their join.
        return splice_dumps_utf8(body, ("messages",), compact_utf8(messages, message_texts))

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        message_texts: Sequence[MessageTexts | None] | None = None,
    ) -> ProviderResponse:
        """One chat completion, retried as the class docstring says. `latency_ms` is the duration of
        the successful attempt; `extra` holds `attempts` and the response `id` when the server sent one."""
        used_model = model or self.model
        body = self.request_body(
            messages,
            tools=tools,
            model=used_model,
            temperature=temperature,
            max_tokens=max_tokens,
            message_texts=message_texts,
        )
        client = self._get_client()
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            started = time.perf_counter()
            try:
                if self.stream:
                    response = await self._attempt_stream(client, body, used_model)
                else:
                    response = await self._attempt_json(client, body, used_model)
            except _RetryableFailure as failure:
                if attempt + 1 >= attempts:
                    error = failure.error
                    error.args = (f"{error.args[0]} (after {attempts} attempt{'s' if attempts > 1 else ''})",)
                    raise error from error.__cause__
                delay = retry_delay(
                    attempt, failure.retry_after, base=self.backoff_base, cap=self.backoff_max, rng=self._rng
                )
                logger.warning(
                    "provider %s: attempt %d/%d failed (%s); retrying in %.2fs",
                    self.name,
                    attempt + 1,
                    attempts,
                    failure.error,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            latency_ms = int((time.perf_counter() - started) * 1000)
            extra = {**response.extra, "attempts": attempt + 1}
            return ProviderResponse(
                content=response.content,
                tool_calls=response.tool_calls,
                usage=response.usage,
                finish_reason=response.finish_reason,
                model=response.model,
                latency_ms=latency_ms,
                streamed=response.streamed,
                extra=extra,
            )
        raise AssertionError("unreachable: the retry loop returns or raises")  # pragma: no cover

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it; an injected client is left open."""
        if self._owns_client and self._client is not None:
            client, self._client, self._client_loop = self._client, None, None
            await client.aclose()

    # -- internals ---------------------------------------------------------------------------------

    def _get_client(self) -> httpx.AsyncClient:
        if not self._owns_client:
            assert self._client is not None
            return self._client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._client_loop is not loop:
            # A pooled connection belongs to the loop that opened it, so a new loop needs a new client.
            self._client = httpx.AsyncClient(timeout=self._httpx_timeout)
            self._client_loop = loop
        return self._client

    def _headers_for(self, stream: bool) -> dict[str, str]:
        return {**self._headers, "Accept": "text/event-stream" if stream else "application/json"}

    async def _attempt_json(self, client: httpx.AsyncClient, body: bytes, model: str) -> ProviderResponse:
        try:
            response = await client.post(
                self.url, content=body, headers=self._headers_for(False), timeout=self._httpx_timeout
            )
        except httpx.TransportError as exc:
            raise self._transport_failure(exc) from exc
        self._check_status(response)
        return self._parse_completion(self._decode_json(response.content), model)

    async def _attempt_stream(self, client: httpx.AsyncClient, body: bytes, model: str) -> ProviderResponse:
        try:
            async with client.stream(
                "POST", self.url, content=body, headers=self._headers_for(True), timeout=self._httpx_timeout
            ) as response:
                if not 200 <= response.status_code < 300:
                    await response.aread()
                    self._check_status(response)
                content_type = response.headers.get("content-type", "")
                if content_type.startswith("application/json"):
                    # Some servers ignore "stream": true and answer with one JSON completion.
                    return self._parse_completion(self._decode_json(await response.aread()), model)
                return await self._read_sse(response, model)
        except httpx.TransportError as exc:
            raise self._transport_failure(exc) from exc

    def _transport_failure(self, exc: httpx.TransportError) -> _RetryableFailure:
        error: ProviderError
        if isinstance(exc, httpx.TimeoutException):
            kind = type(exc).__name__
            error = ProviderTimeout(
                f"{self.name}: no answer from {self.url} in time ({kind})", provider=self.name
            )
        else:
            detail = str(exc) or type(exc).__name__
            error = ProviderConnectionError(
                f"{self.name}: cannot reach {self.url}: {self._redact(detail)}", provider=self.name
            )
        error.__cause__ = exc
        return _RetryableFailure(error)

    def _check_status(self, response: httpx.Response) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        text = self._redact(response.text)[:MAX_ERROR_BODY_CHARS]
        snippet = " ".join(text.split())[:200]
        error = ProviderHTTPError(
            f"{self.name}: HTTP {status} from {self.url}" + (f": {snippet}" if snippet else ""),
            status_code=status,
            body=text,
            provider=self.name,
        )
        if status == 429 or status >= 500:
            retry_after = parse_retry_after(response.headers.get("retry-after"), cap=self.max_retry_after)
            raise _RetryableFailure(error, retry_after)
        raise error

    def _redact(self, text: str) -> str:
        if self._api_key and len(self._api_key) >= 4:
            return text.replace(self._api_key, "***")
        return text

    def _decode_json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            snippet = raw[:200].decode("utf-8", "replace")
            raise ProviderResponseError(
                f"{self.name}: the response body is not JSON: {snippet!r}", provider=self.name
            ) from None

    def _bad(self, what: str) -> ProviderResponseError:
        return ProviderResponseError(f"{self.name}: not a chat completion: {what}", provider=self.name)

    def _parse_completion(self, data: Any, model: str) -> ProviderResponse:
        if not isinstance(data, dict):
            raise self._bad("the body is not a JSON object")
        if "choices" not in data and isinstance(data.get("error"), dict | str):
            raise self._bad(f"the server sent an error object: {_error_message(data['error'])}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._bad("'choices' is missing or empty")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise self._bad("'choices[0].message' is missing")
        content = message.get("content")
        if isinstance(content, list):
            content = content_text(content)
        if content is not None and not isinstance(content, str):
            raise self._bad("'message.content' must be a string or null")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise self._bad("'message.tool_calls' must be a list")
        calls = []
        for i, raw in enumerate(raw_calls):
            fn = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise self._bad(f"tool call {i} has no function name")
            args = fn.get("arguments")
            if args is None:
                args = ""
            elif not isinstance(args, str):
                # Some servers send an object instead of the JSON string the protocol asks for.
                args = json.dumps(args, ensure_ascii=False)
            call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call_{i}"
            calls.append(ToolCall(id=call_id, name=fn["name"], arguments=args))
        finish = choices[0].get("finish_reason")
        extra = {"id": data["id"]} if isinstance(data.get("id"), str) else {}
        return ProviderResponse(
            content=content,
            tool_calls=tuple(calls),
            usage=_parse_usage(data.get("usage")),
            finish_reason=finish if isinstance(finish, str) else None,
            model=data["model"] if isinstance(data.get("model"), str) else model,
            streamed=False,
            extra=extra,
        )

    async def _read_sse(self, response: httpx.Response, model: str) -> ProviderResponse:
        """Assemble an SSE chat-completion stream. Events are separated by blank lines; `data:` lines of
        one event are joined with newlines; comments (`:`) and other fields are ignored."""
        state = _StreamState(model=model)
        data_lines: list[str] = []
        async for line in response.aiter_lines():
            if line == "":
                if data_lines:
                    self._sse_event(state, "\n".join(data_lines))
                    data_lines = []
                if state.done:
                    break
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if field == "data":
                data_lines.append(value[1:] if value.startswith(" ") else value)
        if data_lines and not state.done:
            self._sse_event(state, "\n".join(data_lines))
        if not state.done and state.finish_reason is None:
            raise ProviderResponseError(
                f"{self.name}: the SSE stream ended before [DONE] or a finish_reason", provider=self.name
            )
        calls = []
        for index in sorted(state.calls):
            slot = state.calls[index]
            if not slot["name"]:
                raise ProviderResponseError(
                    f"{self.name}: streamed tool call {index} has no function name", provider=self.name
                )
            calls.append(
                ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments="".join(slot["args"]))
            )
        if state.content:
            content: str | None = "".join(state.content)
        else:
            content = None if calls else ""
        return ProviderResponse(
            content=content,
            tool_calls=tuple(calls),
            usage=state.usage,
            finish_reason=state.finish_reason,
            model=state.model,
            streamed=True,
            extra={"id": state.id} if state.id else {},
        )

    def _sse_event(self, state: _StreamState, payload: str) -> None:
        if payload.strip() == "[DONE]":
            state.done = True
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            raise ProviderResponseError(
                f"{self.name}: an SSE chunk is not JSON: {payload[:200]!r}", provider=self.name
            ) from None
        if not isinstance(chunk, dict):
            raise ProviderResponseError(f"{self.name}: an SSE chunk is not a JSON object", provider=self.name)
        if "error" in chunk and "choices" not in chunk:
            raise ProviderResponseError(
                f"{self.name}: the stream carried an error: {_error_message(chunk['error'])}",
                provider=self.name,
            )
        if isinstance(chunk.get("model"), str):
            state.model = chunk["model"]
        if isinstance(chunk.get("id"), str):
            state.id = chunk["id"]
        usage = _parse_usage(chunk.get("usage"))
        if usage is not None:
            state.usage = usage
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                state.content.append(delta["content"])
            for position, tc in enumerate(delta.get("tool_calls") or []):
                if not isinstance(tc, dict):
                    continue
                index = tc.get("index", position)
                slot = state.calls.setdefault(index, {"id": None, "name": "", "args": []})
                if isinstance(tc.get("id"), str) and tc["id"] and not slot["id"]:
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                # OpenAI sends the name once, in the first delta of a call; keep the first one.
                if isinstance(fn.get("name"), str) and fn["name"] and not slot["name"]:
                    slot["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["args"].append(fn["arguments"])
            if isinstance(choice.get("finish_reason"), str):
                state.finish_reason = choice["finish_reason"]


class _StreamState:
    def __init__(self, model: str) -> None:
        self.model = model
        self.id: str | None = None
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.done = False


def _parse_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None

    def count(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    prompt, completion = count("prompt_tokens"), count("completion_tokens")
    total = count("total_tokens") or prompt + completion
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:200]
    return str(error)[:200]
