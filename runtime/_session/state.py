"""The session and pool state formats: a pure codec.

`encode_session` turns a `SessionState` into the JSON-safe dict `ChatSession.export_state()` returns;
`decode_session` checks such a dict and gives the `SessionState` back (`encode_pool` / `decode_pool`
do the same for `AgentPool.export_state()`). This module knows the format only: it imports no
session, pool or runtime. Resolving a decoded state into a live session (its provider, primitives,
trace writer and budgets) is `Runtime.chat(state=...)`'s work (and `AgentPool.add()`'s for a resumed
agent); the session applies the decoded history, pins and cursors to itself.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

STATE_FORMAT = "arcana-console/session-state"
POOL_STATE_FORMAT = "arcana-console/pool-state"
STATE_VERSION = 1


@dataclass
class SessionState:
    """One session's exported state, as the format holds it (the saved choices are not resolved:
    `provider` may name a provider this runtime does not have, `cognitive_primitives` is unchecked)."""

    run_id: str
    system: str
    history: list[dict[str, Any]]
    message_turns: list[int]
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    cognitive_primitives: list[str] | None = None
    turn: int = 0
    spine: str | None = None
    include_history: bool = True
    first_turn_in_memory: int = 1
    pins: list[dict[str, Any]] | None = None
    recall_log: list[dict[str, Any]] | None = None
    budgets: dict[str, Any] = field(default_factory=dict)
    provider_cursor: Any = None
    token_calibration: dict[str, Any] | None = None


@dataclass
class PoolState:
    """A pool's exported state: its run, budget totals, default primitives, and each agent's encoded
    session state (decoded when that agent is added back)."""

    run_id: str
    budgets: dict[str, Any] = field(default_factory=dict)
    default_primitives: list[str] | None = None
    agents: dict[str, Any] = field(default_factory=dict)


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


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    # Guarantee JSON-safety now, not when the caller serializes it (and copy every value).
    safe: dict[str, Any] = json.loads(json.dumps(state, ensure_ascii=False))
    return safe


def encode_session(state: SessionState) -> dict[str, Any]:
    """The JSON-safe dict of `state` (a fresh copy: nothing in it is shared with the session)."""
    return _json_safe(
        {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "run_id": state.run_id,
            "agent": state.agent,
            "system": state.system,
            "provider": state.provider,
            "model": state.model,
            "cognitive_primitives": state.cognitive_primitives,
            "turn": state.turn,
            "spine": state.spine,
            "include_history": state.include_history,
            "history": state.history,
            "message_turns": state.message_turns,
            "first_turn_in_memory": state.first_turn_in_memory,
            "pins": state.pins,
            "recall_log": state.recall_log,
            "budgets": state.budgets,
            "provider_cursor": state.provider_cursor,
            "token_calibration": state.token_calibration,
        }
    )


def decode_session(state: Any) -> SessionState:
    """The `SessionState` of a dict from `export_state()`; `ConfigError` for anything else (another
    format or version, no run id or system prompt, a history its turn numbers do not match)."""
    _check_state(state, STATE_FORMAT)
    history = state.get("history") or []
    turns = state.get("message_turns") or []
    if len(history) != len(turns) or not history or history[0].get("role") != "system":
        raise ConfigError("state is damaged: history and message_turns do not match")
    return SessionState(
        run_id=state["run_id"],
        system=state["system"],
        history=copy.deepcopy(list(history)),
        message_turns=[int(t) for t in turns],
        agent=state.get("agent"),
        provider=state.get("provider"),
        model=state.get("model"),
        cognitive_primitives=state.get("cognitive_primitives"),
        turn=int(state.get("turn", 0)),
        spine=state.get("spine"),
        include_history=bool(state.get("include_history", True)),
        first_turn_in_memory=int(state.get("first_turn_in_memory", 1)),
        pins=state.get("pins"),
        recall_log=state.get("recall_log"),
        budgets=state.get("budgets") or {},
        provider_cursor=state.get("provider_cursor"),
        token_calibration=state.get("token_calibration"),
    )


def encode_pool(state: PoolState) -> dict[str, Any]:
    """The dict `AgentPool.export_state()` returns (each agent's entry already encoded)."""
    return {
        "format": POOL_STATE_FORMAT,
        "version": STATE_VERSION,
        "run_id": state.run_id,
        "budgets": state.budgets,
        "default_primitives": state.default_primitives,
        "agents": state.agents,
    }


def decode_pool(state: Any) -> PoolState:
    """The `PoolState` of a dict from `AgentPool.export_state()`; `ConfigError` for anything else."""
    _check_state(state, POOL_STATE_FORMAT)
    return PoolState(
        run_id=state["run_id"],
        budgets=state.get("budgets") or {},
        default_primitives=state.get("default_primitives"),
        agents=dict(state.get("agents") or {}),
    )
