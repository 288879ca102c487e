"""`runtime.__all__` is the public surface: exactly the public names, sorted (STYLE.md item 1)."""

from __future__ import annotations

import runtime
import runtime.compare
import runtime.facts


def test_it_exports_exactly_the_public_names() -> None:
    public = {name for name in vars(runtime) if not name.startswith("_") and name != "annotations"}
    # Submodules imported by the package are attributes too; they are not part of the surface.
    modules = {name for name in public if type(getattr(runtime, name)).__name__ == "module"}
    assert set(runtime.__all__) == public - modules


def test_all_is_sorted_and_unique() -> None:
    assert runtime.__all__ == sorted(set(runtime.__all__))


def test_the_issue_surface_is_exported() -> None:
    required = {
        "Runtime",
        "RuntimeConfig",
        "ChatSession",
        "AgentPool",
        "Reply",
        "ScriptedProvider",
        "OpenAICompatibleProvider",
        "ProviderTimeouts",
        "tool",
        "TraceEvent",
        "JsonlFileSink",
        "CallableSink",
        "HttpBatchSink",
        "MultiSink",
        "TraceReader",
        "ContextDecision",
        "MessageDecision",
        "ContextStrategy",
        "WorkingSetBuilder",
        "TokenCounter",
        "PinBlock",
        "ArcanaRuntimeError",
        "ConfigError",
        "ContextOverflowError",
        "ProviderError",
        "ProviderTimeout",
        "ProviderHTTPError",
        "ProviderConnectionError",
        "ProviderResponseError",
        "ToolDefinitionError",
        "TraceFormatError",
    }
    assert required <= set(runtime.__all__)
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None


# runtime.facts: the one reading of a trace (turns, pins, outcomes, failures, bundles)
FACTS = {
    "NormalizedEvent",
    "PinLifetime",
    "PinnedBlock",
    "PrimitiveOutcome",
    "RunLinks",
    "SendOutcome",
    "StepError",
    "StepView",
    "ToolResult",
    "TurnView",
    "build_steps",
    "normalize_events",
    "pin_active_at",
    "pin_lifetimes",
    "pinned_blocks",
    "primitive_outcome",
    "run_links",
    "run_outcome",
    "step_errors",
    "tool_results",
    "turn_outcome",
}
# runtime.compare: two runs at the level of the context
COMPARE = {"Comparison", "RunData", "compare", "run_data_from_events"}


def test_facts_and_compare_are_exported_from_their_own_modules_only() -> None:
    assert FACTS <= set(runtime.facts.__all__)
    assert COMPARE <= set(runtime.compare.__all__)
    assert not (FACTS | COMPARE) & set(runtime.__all__)
    # (`runtime.compare` itself is the submodule, an attribute once imported.)
    assert [n for n in FACTS if n in vars(runtime)] == []
    assert [n for n in COMPARE if vars(runtime).get(n) is getattr(runtime.compare, n)] == []


def test_the_module_docstring_is_kept() -> None:
    assert runtime.__doc__ and "Pure Python" in runtime.__doc__
