"""Every exception the runtime raises, in one place.

ArcanaRuntimeError                 base class: catch this to catch anything the runtime raises
├── ConfigError                    a Runtime / RuntimeConfig / pool argument is invalid
├── ProviderError                  the model provider failed
│   ├── ProviderTimeout            no answer within the configured timeout (after retries)
│   ├── ProviderConnectionError    the endpoint could not be reached (after retries)
│   ├── ProviderHTTPError          the endpoint answered with an error status (after retries)
│   └── ProviderResponseError      the endpoint answered 2xx with a body we cannot read
├── ContextOverflowError           a message cannot fit the context window even on its own
├── ToolDefinitionError            a tool function cannot be described to the model
└── TraceFormatError               a trace line or event is not a valid TraceEvent
"""

from __future__ import annotations


class ArcanaRuntimeError(Exception):
    """Base class of every error raised by `runtime`."""


class ConfigError(ArcanaRuntimeError, ValueError):
    """Raised at construction when a configuration value is invalid (unknown primitive name,
    negative window, a user tool named like an enabled primitive, ...)."""


class ProviderError(ArcanaRuntimeError):
    """Raised when the model provider fails. `provider` names the provider that failed."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider


class ProviderTimeout(ProviderError):
    """Raised when the provider did not answer within the timeout, after all retries."""


class ProviderConnectionError(ProviderError):
    """Raised when the provider endpoint could not be reached, after all retries."""


class ProviderHTTPError(ProviderError):
    """Raised when the provider answered with a non-2xx status (after retries for 429 and 5xx).
    `status_code` and `body` (truncated) say what it answered."""

    def __init__(
        self, message: str, *, status_code: int, body: str = "", provider: str | None = None
    ) -> None:
        super().__init__(message, provider=provider)
        self.status_code = status_code
        self.body = body


class ProviderResponseError(ProviderError):
    """Raised when a 2xx response cannot be parsed as a chat completion (or SSE stream)."""


class ContextOverflowError(ArcanaRuntimeError):
    """Raised by `ChatSession.send()` when a message is too large to fit the context window even
    alone (identity and tool schemas included). Nothing is silently truncated."""


class ToolDefinitionError(ArcanaRuntimeError, TypeError):
    """Raised when a tool function lacks what is needed to build its JSON schema."""


class TraceFormatError(ArcanaRuntimeError, ValueError):
    """Raised when a trace event is not a valid Arcana TraceEvent. `line` is the 1-based line number
    when it came from a file."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line
        self.reason = message
