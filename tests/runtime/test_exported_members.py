"""`runtime.__all__` is the public surface: exactly the public names, sorted (STYLE.md item 1); each
public name carries its public module (`runtime.Runtime`), and still pickles."""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import pickle
import traceback
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import runtime
import runtime.compare
import runtime.errors
import runtime.facts
import runtime.tracefiles
from runtime._public import PUBLIC_MODULES


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


# -- public names carry their public module ------------------------------------------------------------


def _exported(module: ModuleType) -> dict[str, Any]:
    """The classes and functions a public module exports (its `__all__`, or its public names)."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = {n: getattr(module, n) for n in names}
    return {
        n: obj
        for n, obj in found.items()
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__.startswith("runtime")
    }


def test_every_exported_name_carries_a_public_module_that_has_it() -> None:
    """As httpx does: reprs, tracebacks and pickles name `runtime.Runtime`, not
    `runtime._session.runtime.Runtime`; the module named has the name, so pickle finds it there."""
    for module_name in sorted(PUBLIC_MODULES):
        module = importlib.import_module(module_name)
        for name, obj in _exported(module).items():
            assert obj.__module__ in PUBLIC_MODULES, f"{module_name}.{name} is {obj.__module__}.{name}"
            home = importlib.import_module(obj.__module__)
            assert getattr(home, obj.__qualname__) is obj, f"{obj.__module__} has no {obj.__qualname__}"


def test_each_name_carries_the_module_it_is_imported_from() -> None:
    errors = set(_exported(runtime.errors))
    for name, obj in _exported(runtime).items():
        assert obj.__module__ == ("runtime.errors" if name in errors else "runtime"), name
    for module in (runtime.facts, runtime.compare, runtime.tracefiles, runtime.errors):
        for name, obj in _exported(module).items():
            assert obj.__module__ == module.__name__, name
    assert repr(runtime.Runtime) == "<class 'runtime.Runtime'>"
    assert repr(runtime.Runtime({"scripted": runtime.ScriptedProvider(["x"])})).startswith(
        "<runtime.Runtime object"
    )
    assert repr(runtime.facts.TurnView) == "<class 'runtime.facts.TurnView'>"
    assert repr(runtime.compare.RunData) == "<class 'runtime.compare.RunData'>"
    error = runtime.ProviderTimeout("no answer")
    assert traceback.format_exception_only(error) == ["runtime.errors.ProviderTimeout: no answer\n"]


def test_type_hints_of_exported_names_still_resolve() -> None:
    """A class's string annotations are looked up in its `__module__`: they were resolved before it
    changed (runtime/_public.py), so `typing.get_type_hints` (pydantic, cattrs, …) still works."""
    for module_name in sorted(PUBLIC_MODULES):
        for name, obj in _exported(importlib.import_module(module_name)).items():
            assert isinstance(typing.get_type_hints(obj), dict), f"{module_name}.{name}"
    assert typing.get_type_hints(runtime.Reply)["usage"] is runtime.Usage
    assert typing.get_type_hints(runtime.facts.StepView)["turn_event"] == runtime.TraceEvent | None


def test_exported_values_pickle_and_copy(tmp_path: Path) -> None:
    """The server caches `RunData` (Django's cache pickles it); sessions' values and the errors may be
    pickled by a user. Each round-trips under its public module's name."""
    for module_name in sorted(PUBLIC_MODULES):
        for obj in _exported(importlib.import_module(module_name)).values():
            assert pickle.loads(pickle.dumps(obj)) is obj
    rt = runtime.Runtime(
        {"scripted": runtime.ScriptedProvider(["Hi there."])},
        config=runtime.RuntimeConfig(trace_dir=str(tmp_path)),
    )

    async def chat() -> runtime.Reply:
        async with rt.chat() as session:
            return await session.send("hello")

    reply = asyncio.run(chat())
    reader = runtime.TraceReader(tmp_path)
    events = reader.events(reply.run_id)
    values: list[Any] = [
        reply,
        reply.usage,
        events[0],
        reader.turns(reply.run_id)[0],
        runtime.facts.run_outcome(reader.turns(reply.run_id), events),
        runtime.compare.run_data_from_events(reply.run_id, events),
        runtime.RuntimeConfig(trace_dir=None),
        runtime.ConfigError("bad value"),
        runtime.ProviderTimeout("no answer", provider="scripted"),
    ]
    for value in values:
        for copied in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
            assert type(copied) is type(value)
            if isinstance(value, Exception):
                assert copied.args == value.args
            else:
                assert copied == value
