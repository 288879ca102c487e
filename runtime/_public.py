"""Public names carry their public module, as httpx's do: `runtime.Runtime`, not
`runtime._session.runtime.Runtime`, in reprs, tracebacks and pickles.

Each public module ends with `publish(globals())`: every class and function in its `__all__` that a
private module of the runtime defines (`runtime._…`, `runtime.facts._pins`, or `runtime.compare`'s
implementation modules `data` / `diff` / `events`) gets that public module as its `__module__`. A name
a public module defines keeps it (the exceptions stay `runtime.errors.ConfigError`, also exported by
`runtime`). Pickle finds a class by `__module__` and `__qualname__`, so a published name must be an
attribute of its public module under its own name: `tests/runtime/test_exported_members.py` checks
both, and that the pickled values (`RunData` is cached by the server) still round-trip.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from typing import Any

#: The runtime's public modules: what `traces/` and users import (README, "Where things live").
PUBLIC_MODULES = frozenset(
    {
        "runtime",
        "runtime.compare",
        "runtime.demo",
        "runtime.errors",
        "runtime.facts",
        "runtime.rerun",
        "runtime.scenarios",
        "runtime.tracefiles",
    }
)


def publish(namespace: Mapping[str, Any]) -> None:
    """Name the public module whose `namespace` this is as the `__module__` of each class and
    function in its `__all__` that a private module of the runtime defines."""
    module = namespace["__name__"]
    if module not in PUBLIC_MODULES:
        raise AssertionError(f"{module} is not a public module of the runtime")
    for name in namespace["__all__"]:
        obj = namespace[name]
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants (PRESETS, ENVELOPE_KEYS, …) have no module of their own
        defined_in: str = obj.__module__
        if defined_in.startswith("runtime.") and defined_in not in PUBLIC_MODULES:
            if inspect.isclass(obj):
                _resolve_annotations(obj)
            obj.__module__ = module


def _resolve_annotations(cls: type) -> None:
    """Resolve `cls`'s own string annotations (`from __future__ import annotations`) while its
    `__module__` still names the module they were written in: `typing.get_type_hints` (and pydantic,
    cattrs, …) look a class's annotations up in the namespace of its `__module__`, which is about to
    become the public module's. A function keeps its own `__globals__`, so it needs nothing."""
    own = cls.__dict__.get("__annotations__")
    if not own or not any(isinstance(value, str) for value in own.values()):
        return
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # a name imported only for type checking: left as written
        return
    cls.__annotations__ = {name: hints.get(name, value) for name, value in own.items()}
