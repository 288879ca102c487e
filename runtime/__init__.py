"""Arcana Console's agent runtime: providers, working-set builder, sessions, pools, cognitive
primitives and traces. Pure Python: nothing here imports Django, DRF, Celery or `traces`."""

from __future__ import annotations

from ._config import RuntimeConfig
from ._http_sink import HttpBatchSink
from ._primitives import CognitiveHandler, PinEntry, PinState
from ._provider_types import Provider, ProviderResponse, ToolCall, Usage
from ._providers import PRESETS, OpenAICompatibleProvider, ProviderTimeouts, ScriptedProvider
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
from .compare import Comparison, RunData, run_data_from_events
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
from .facts import (
    NormalizedEvent,
    PinLifetime,
    PinnedBlock,
    PrimitiveOutcome,
    RunLinks,
    SendOutcome,
    StepError,
    StepView,
    ToolResult,
    TurnView,
    build_steps,
    normalize_events,
    pin_active_at,
    pin_lifetimes,
    pinned_blocks,
    primitive_outcome,
    run_links,
    run_outcome,
    step_errors,
    tool_results,
    turn_outcome,
)

__all__ = [
    "AgentPool",
    "ArcanaRuntimeError",
    "CalibratedCounter",
    "CallableSink",
    "ChatSession",
    "CognitiveHandler",
    "Comparison",
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
    "NormalizedEvent",
    "OpenAICompatibleProvider",
    "PRESETS",
    "PinBlock",
    "PinEntry",
    "PinLifetime",
    "PinState",
    "PinnedBlock",
    "PrimitiveOutcome",
    "Provider",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderResponse",
    "ProviderResponseError",
    "ProviderTimeout",
    "ProviderTimeouts",
    "Reply",
    "RunData",
    "RunLinks",
    "Runtime",
    "RuntimeConfig",
    "ScriptedProvider",
    "SendOutcome",
    "StepError",
    "StepView",
    "TokenCounter",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolResult",
    "TraceEvent",
    "TraceFormatError",
    "TraceReader",
    "TraceSink",
    "TraceWriter",
    "TurnView",
    "Usage",
    "WorkingSet",
    "WorkingSetBuilder",
    "build_steps",
    "normalize_events",
    "pin_active_at",
    "pin_lifetimes",
    "pinned_blocks",
    "primitive_outcome",
    "run_data_from_events",
    "run_links",
    "run_outcome",
    "step_errors",
    "tool",
    "tool_results",
    "turn_outcome",
]
