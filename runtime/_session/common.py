"""Small helpers the runtime, sessions and pools share: the default system prompt, run id and
tool-name checks, and closing a run on every sink."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .._config import primitive_tool_names
from .._tools import Tool
from .._trace import id_problem
from .._trace_writer import MultiSink
from ..errors import ConfigError

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


def check_tool_names(tools: Mapping[str, Tool], primitives: Sequence[str], where: str) -> None:
    clash = sorted(set(tools) & set(primitive_tool_names(primitives)))
    if clash:
        raise ConfigError(
            f"{where}: tool(s) {', '.join(repr(c) for c in clash)} have the name of an enabled cognitive "
            "primitive; rename the tool or disable the primitive"
        )


def check_run_id(run_id: str | None) -> str:
    if run_id is None:
        return str(uuid.uuid4())
    if not isinstance(run_id, str) or not run_id.strip() or len(run_id) > 200:
        raise ConfigError(f"run_id must be a non-empty string of at most 200 characters, got {run_id!r}")
    problem = id_problem(run_id)  # the rule every reader and the server apply (docs/trace-format.md)
    if problem is not None:
        raise ConfigError(f"run_id {run_id!r} {problem}")
    return run_id


def flatten(sink: Any) -> list[Any]:
    if sink is None:
        return []
    if isinstance(sink, MultiSink):
        return [s for inner in sink.sinks for s in flatten(inner)]
    return [sink]


def close_run(sink: Any, run_id: str) -> None:
    for s in flatten(sink):
        close_run = getattr(s, "close_run", None)
        if callable(close_run):
            close_run(run_id)
        else:
            flush = getattr(s, "flush", None)
            if callable(flush):
                flush()
