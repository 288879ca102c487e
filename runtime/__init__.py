"""Arcana Console's agent runtime: providers, working-set builder, sessions, pools, cognitive
primitives and traces. Pure Python: nothing here imports Django, DRF, Celery or `traces`.

What a trace means and how two runs compare are their own public modules, imported from there only:
`runtime.facts` (turns, steps, pins, outcomes, failures) and `runtime.compare` (`compare`, `RunData`).
`runtime.errors` defines the exceptions (also exported here); `runtime.tracefiles`, `runtime.scenarios`
and `runtime.demo` are the other public modules. Everything else (`runtime._…`) is private."""

from __future__ import annotations

from ._config import RuntimeConfig
from ._http_sink import HttpBatchSink
from ._otlp_sink import OtlpExportSink
from ._primitives import CognitiveHandler, PinEntry, PinState
from ._provider_types import Provider, ProviderResponse, ToolCall, Usage
from ._providers import PRESETS, OpenAICompatibleProvider, ProviderTimeouts, ScriptedProvider
from ._public import publish as _publish
from ._session import AgentPool, ChatSession, Reply, Runtime
from ._tokens import CalibratedCounter, TokenCounter
from ._tools import Tool, tool
from ._trace import ENVELOPE_KEYS, TraceEvent
from ._trace_reader import TraceReader
from ._trace_writer import CallableSink, JsonlFileSink, MultiSink, TraceSink, TraceWriter
from ._working_set import (
    ContextDecision,
    ContextReport,
    ContextStrategy,
    MessageDecision,
    PinBlock,
    WorkingSet,
    WorkingSetBuilder,
)
from .errors import (
    ArcanaRuntimeError,
    ConfigError,
    ContextOverflowError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderResponseError,
    ProviderTimeout,
    ToolDefinitionError,
    TraceFormatError,
)

__all__ = [
    "AgentPool",
    "ArcanaRuntimeError",
    "CalibratedCounter",
    "CallableSink",
    "ChatSession",
    "CognitiveHandler",
    "ConfigError",
    "ContextDecision",
    "ContextOverflowError",
    "ContextReport",
    "ContextStrategy",
    "ENVELOPE_KEYS",
    "HttpBatchSink",
    "JsonlFileSink",
    "MessageDecision",
    "MultiSink",
    "OpenAICompatibleProvider",
    "OtlpExportSink",
    "PRESETS",
    "PinBlock",
    "PinEntry",
    "PinState",
    "Provider",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderResponse",
    "ProviderResponseError",
    "ProviderTimeout",
    "ProviderTimeouts",
    "Reply",
    "Runtime",
    "RuntimeConfig",
    "ScriptedProvider",
    "TokenCounter",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "TraceEvent",
    "TraceFormatError",
    "TraceReader",
    "TraceSink",
    "TraceWriter",
    "Usage",
    "WorkingSet",
    "WorkingSetBuilder",
    "tool",
]

# Reprs, tracebacks and pickles name this module, not the private one (runtime/_public.py).
_publish(globals())
