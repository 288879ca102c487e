"""Exporting and resuming sessions and pools: the JSON-safe state format and its checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._config import normalize_primitives
from .._tokens import CalibratedCounter
from .._tools import Tool
from .._trace_writer import TraceWriter
from ..errors import ConfigError
from .common import _check_tool_names

if TYPE_CHECKING:
    from .pool import AgentPool
    from .runtime import Runtime
    from .session import ChatSession


STATE_FORMAT = "arcana-console/session-state"
POOL_STATE_FORMAT = "arcana-console/pool-state"
STATE_VERSION = 1


def _check_state(state: Any, fmt: str) -> None:
    if not isinstance(state, Mapping):
        raise ConfigError(f"state must be a dict from export_state(), got {type(state).__name__}")
    if state.get("format") != fmt:
        raise ConfigError(f"state is not a {fmt!r} export (format={state.get('format')!r})")
    if state.get("version") != STATE_VERSION:
        raise ConfigError(
            f"unsupported state version {state.get('version')!r}; this runtime reads {STATE_VERSION}"
        )
    if not isinstance(state.get("run_id"), str):
        raise ConfigError("state has no run_id")
    if fmt == STATE_FORMAT and not isinstance(state.get("system"), str):
        raise ConfigError("state has no system prompt")


def session_state(session: ChatSession, *, include_history: bool = True) -> dict[str, Any]:
    """`ChatSession.export_state()`: everything needed to continue the conversation elsewhere."""

    if session._in_turn:
        raise ConfigError("export_state() cannot run while a turn is in progress")
    cursor = None
    export = getattr(session.provider, "export_state", None)
    if callable(export):
        cursor = export()
    if include_history:
        history, turns, first = session.history, session._message_turns, session._first_turn_in_memory
    else:
        history, turns, first = session.history[:1], [0], session.turn + 1
    state = {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "run_id": session.run_id,
        "agent": session.agent,
        "system": session.system,
        "provider": session.provider_name,
        "model": session.model,
        "cognitive_primitives": list(session.cognitive.enabled),
        "turn": session.turn,
        "spine": session._spine,
        "include_history": include_history,
        "history": copy.deepcopy(history),
        "message_turns": list(turns),
        "first_turn_in_memory": first,
        "pins": session.cognitive.pins.to_list(),
        "recall_log": [r.to_dict() for r in session.cognitive.recall_log],
        "budgets": session.writer.budgets.to_dict(),
        "provider_cursor": cursor,
        "token_calibration": session.counter.to_dict()
        if isinstance(session.counter, CalibratedCounter)
        else None,
    }
    # Guarantee JSON-safety now, not when the caller serializes it.
    safe: dict[str, Any] = json.loads(json.dumps(state, ensure_ascii=False))
    return safe


def restore_session(
    session_class: type[ChatSession],
    runtime: Runtime,
    state: Mapping[str, Any],
    *,
    system: str | None,
    provider: str | None,
    model: str | None,
    cognitive_primitives: Sequence[str] | None,
    tools: Mapping[str, Tool],
    writer: TraceWriter | None,
    pool: AgentPool | None = None,
    agent: str | None = None,
) -> ChatSession:
    """`ChatSession._from_state()`: a session of `session_class` continuing the exported `state`."""
    _check_state(state, STATE_FORMAT)
    saved_system = state["system"]
    if system is not None and system != saved_system:
        raise ConfigError("state was exported with a different system prompt; pass system=None to resume it")
    prov = provider if provider is not None else state.get("provider")
    if prov not in runtime.providers:
        prov = runtime._provider_name(provider)
    primitives = normalize_primitives(
        state.get("cognitive_primitives") if cognitive_primitives is None else cognitive_primitives
    )
    _check_tool_names(tools, primitives, "chat(state=...)")
    if writer is None:
        writer = runtime._writer(str(state["run_id"]))
    session = session_class(
        runtime,
        system=saved_system,
        provider=prov,
        model=model if model is not None else state.get("model"),
        tools=tools,
        primitives=primitives,
        writer=writer,
        agent=agent,
        pool=pool,
    )
    history = state.get("history") or []
    turns = state.get("message_turns") or []
    if len(history) != len(turns) or not history or history[0].get("role") != "system":
        raise ConfigError("state is damaged: history and message_turns do not match")
    session.history = copy.deepcopy(list(history))
    session._message_turns = [int(t) for t in turns]
    session._first_turn_in_memory = int(state.get("first_turn_in_memory", 1))
    session.turn = int(state.get("turn", 0))
    session._spine = state.get("spine")
    session.cognitive.restore_state({"pins": state.get("pins"), "recall_log": state.get("recall_log")})
    if pool is None:
        writer.budgets.restore(state.get("budgets") or {})
    calibration = state.get("token_calibration")
    if calibration and isinstance(session.counter, CalibratedCounter):
        session.counter.restore(calibration)
    cursor = state.get("provider_cursor")
    restore = getattr(session.provider, "restore_state", None)
    if cursor is not None and callable(restore):
        restore(cursor)
    return session
