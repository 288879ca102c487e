"""Tools the model may call: the `tool` decorator, JSON schemas from type hints, and safe dispatch.

    >>> @tool
    ... def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    ...     '''Current weather for a city.
    ...
    ...     Args:
    ...         city: City name, e.g. "Paris".
    ...         unit: Temperature unit.
    ...     '''
    >>> @tool(name="lookup", description="Look a word up.")
    ... async def lookup_word(word: str) -> dict: ...
    >>> Runtime(..., tools=[get_weather, lookup_word, plain_type_hinted_function])

Plain type-hinted functions are accepted as they are (the decorator only adds a name/description
override). Supported parameter types: str, int, float, bool, list[...], dict[...], Optional[...] /
`X | None`, Literal[...], with defaults. A tool never crashes a conversation: bad arguments and
exceptions come back to the model as `{"error": "...", "error_category": "..."}`, with Arcana's
`ToolErrorCategory` values: "validation" (bad arguments) and "unexpected" (the tool raised).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ToolDefinitionError

_PY_TO_JSON: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class Tool:
    """A callable the model can use. `schema` is the OpenAI function-tool dict sent to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    is_async: bool
    side_effect: str = "read"
    _param_types: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def check_arguments(self, args: dict[str, Any]) -> str | None:
        """Return a readable reason when `args` do not match the signature, else None."""
        required = set(self.parameters.get("required", []))
        missing = sorted(required - set(args))
        if missing:
            return f"missing required argument(s): {', '.join(missing)}"
        unknown = sorted(set(args) - set(self.parameters.get("properties", {})))
        if unknown:
            return f"unexpected argument(s): {', '.join(unknown)}"
        for name, value in args.items():
            problem = _type_problem(value, self._param_types.get(name, Any))
            if problem:
                return f"argument '{name}': {problem}"
        return None


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: Literal["read", "write"] = "read",
) -> Any:
    """Mark a function as a tool, optionally renaming it or overriding its description.

    Usable bare (`@tool`) or with arguments (`@tool(name="x")`). Returns the function unchanged
    except for a `__arcana_tool__` attribute, so it stays callable from ordinary code."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__arcana_tool__ = {"name": name, "description": description, "side_effect": side_effect}  # type: ignore[attr-defined]
        as_tool(f)  # fail at decoration time if the function cannot be described
        return f

    if fn is not None:
        return wrap(fn)
    return wrap


def as_tool(obj: Any) -> Tool:
    """Build a `Tool` from a `Tool`, an `@tool` function or a plain type-hinted function."""
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise ToolDefinitionError(f"a tool must be a function, got {type(obj).__name__}")
    opts = getattr(obj, "__arcana_tool__", {}) or {}
    fn_name = getattr(obj, "__name__", None)
    name = opts.get("name") or fn_name
    if not name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise ToolDefinitionError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
    doc = inspect.getdoc(obj) or ""
    summary, param_docs = _parse_docstring(doc)
    description = opts.get("description") or summary or name
    try:
        hints = typing.get_type_hints(obj)
    except Exception as exc:  # unresolvable forward references
        raise ToolDefinitionError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc
    sig = inspect.signature(obj)
    properties: dict[str, Any] = {}
    required: list[str] = []
    param_types: dict[str, Any] = {}
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name!r}: *args/**kwargs cannot be described to the model")
        if pname not in hints:
            raise ToolDefinitionError(f"tool {name!r}: parameter '{pname}' needs a type hint")
        annotation = hints[pname]
        prop = _json_schema(annotation, where=f"tool {name!r} parameter '{pname}'")
        if pname in param_docs:
            prop["description"] = param_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        elif _jsonable(param.default):
            prop["default"] = param.default
        properties[pname] = prop
        param_types[pname] = annotation
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    return Tool(
        name=name,
        description=description,
        parameters=parameters,
        fn=obj,
        is_async=inspect.iscoroutinefunction(obj),
        side_effect=opts.get("side_effect", "read"),
        _param_types=param_types,
    )


def build_tools(tools: Sequence[Any] | None) -> dict[str, Tool]:
    """Describe every tool; duplicate names raise `ToolDefinitionError`."""
    out: dict[str, Tool] = {}
    for obj in tools or ():
        t = as_tool(obj)
        if t.name in out:
            raise ToolDefinitionError(f"two tools are named {t.name!r}")
        out[t.name] = t
    return out


@dataclass(frozen=True)
class ToolOutcome:
    """What running one tool call produced: the text sent back to the model and its trace facts."""

    content: str
    result: Any
    error: str | None
    error_category: str | None
    duration_ms: int


async def run_tool(t: Tool, raw_arguments: str, *, max_chars: int | None) -> ToolOutcome:
    """Run one call. Never raises for tool-side problems: they become structured error results."""
    start = time.perf_counter()
    try:
        args = json.loads(raw_arguments) if raw_arguments.strip() else {}
    except (json.JSONDecodeError, AttributeError) as exc:
        return _failure(f"arguments are not valid JSON: {exc}", "validation", start)
    if not isinstance(args, dict):
        return _failure("arguments must be a JSON object", "validation", start)
    problem = t.check_arguments(args)
    if problem:
        return _failure(problem, "validation", start)
    try:
        if t.is_async:
            value = await t.fn(**args)
        else:
            # Sync tools may block (I/O); keep the event loop free for other sessions.
            value = await asyncio.to_thread(t.fn, **args)
    except Exception as exc:
        return _failure(f"{type(exc).__name__}: {exc}", "unexpected", start)
    content = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if max_chars is not None and len(content) > max_chars:
        content = content[:max_chars] + f"\n[truncated: {len(content)} chars total]"
    return ToolOutcome(content, value if _jsonable(value) else content, None, None, _ms(start))


def _failure(message: str, category: str, start: float) -> ToolOutcome:
    result = {"error": message, "error_category": category}
    return ToolOutcome(json.dumps(result, ensure_ascii=False), result, message, category, _ms(start))


def _ms(start: float) -> int:
    return int((time.perf_counter() - start) * 1000)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _json_schema(annotation: Any, *, where: str) -> dict[str, Any]:
    if annotation is Any:
        return {}
    if annotation in _PY_TO_JSON:
        return {"type": _PY_TO_JSON[annotation]}
    if annotation is type(None):
        return {"type": "null"}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        values = list(args)
        kinds = {type(v) for v in values}
        schema: dict[str, Any] = {"enum": values}
        if len(kinds) == 1 and next(iter(kinds)) in _PY_TO_JSON:
            schema["type"] = _PY_TO_JSON[next(iter(kinds))]
        return schema
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            # Optional[X]: the model may omit it or send null.
            inner = _json_schema(non_null[0], where=where)
            if "type" in inner and isinstance(inner["type"], str):
                inner["type"] = [inner["type"], "null"]
            return inner
        return {"anyOf": [_json_schema(a, where=where) for a in args]}
    if annotation is list or origin is list or origin is Sequence:
        schema = {"type": "array"}
        if args:
            schema["items"] = _json_schema(args[0], where=where)
        return schema
    if annotation is dict or origin is dict:
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = _json_schema(args[1], where=where)
        return schema
    raise ToolDefinitionError(f"{where}: type {annotation!r} cannot be described as JSON")


def _type_problem(value: Any, annotation: Any) -> str | None:
    """A light runtime check of a JSON value against a supported annotation."""
    if annotation is Any:
        return None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return None if value in args else f"must be one of {list(args)!r}, got {value!r}"
    if origin in (typing.Union, types.UnionType):
        if any(_type_problem(value, a) is None for a in args):
            return None
        return f"has the wrong type ({json_schema_type(value)})"
    if annotation is type(None):
        return None if value is None else f"must be null, got {json_schema_type(value)}"
    if annotation is bool:
        return None if isinstance(value, bool) else f"must be a boolean, got {json_schema_type(value)}"
    if annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"must be an integer, got {json_schema_type(value)}"
    if annotation is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"must be a number, got {json_schema_type(value)}"
    if annotation is str:
        return None if isinstance(value, str) else f"must be a string, got {json_schema_type(value)}"
    if annotation is list or origin in (list, Sequence):
        return None if isinstance(value, list) else f"must be an array, got {json_schema_type(value)}"
    if annotation is dict or origin is dict:
        return None if isinstance(value, dict) else f"must be an object, got {json_schema_type(value)}"
    return None


def json_schema_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value ("integer", "string", …), for error messages
    the model reads (tool arguments and primitive arguments alike)."""
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), "null" if value is None else type(value).__name__)


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_OTHER_SECTION = re.compile(r"^(Returns?|Raises|Yields|Examples?|Notes?)\s*:\s*$", re.IGNORECASE)
_SPHINX = re.compile(r"^:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary (text before the first section) and per-parameter descriptions.

    Understands Google style (`Args:` then `name: text` / `name (type): text`) and Sphinx
    `:param name: text`."""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    seen_section = False
    for raw in lines:
        line = raw.strip()
        m = _SPHINX.match(line)
        if m:
            seen_section = True
            current = m.group(1)
            params[current] = m.group(2).strip()
            continue
        if _SECTION.match(line):
            in_args, seen_section, current = True, True, None
            continue
        if _OTHER_SECTION.match(line) or line.startswith(":"):
            in_args, seen_section, current = False, True, None
            continue
        if in_args:
            pm = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if pm:
                current = pm.group(1)
                params[current] = pm.group(2).strip()
            elif line and current:
                params[current] = (params[current] + " " + line).strip()
            continue
        if current and line:
            params[current] = (params[current] + " " + line).strip()
            continue
        if not seen_section:
            summary_lines.append(line)
    summary = "\n".join(summary_lines).strip()
    summary = re.sub(r"\n{3,}", "\n\n", summary)
    return summary, params
