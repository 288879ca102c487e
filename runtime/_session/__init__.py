"""`Runtime`, `ChatSession`, `AgentPool` and `Reply`: the conversation loop.

    >>> rt = Runtime(providers={"scripted": ScriptedProvider(["Hello!"])},
    ...              config=RuntimeConfig(trace_dir="./arcana-traces"), tools=[get_weather])
    >>> async with rt.chat(system="You are terse.") as chat:          # one run, one trace file
    ...     reply = await chat.send("hi")                               # turn 1
    ...     state = chat.export_state()                                 # JSON-safe
    >>> async with rt.chat(state=state) as chat:                        # resumes exactly (any process)
    ...     await chat.send("and then?")                                # turn 2, same run_id
    >>> async with rt.collaborate(cognitive_primitives=["pin"]) as pool:
    ...     a = pool.add("planner", system="...")                       # own history, turns, pins
    ...     await a.send("plan it")

Words (DESIGN.md §1): a **run** is one chat session or one pool (one `run_id`, minted once); a
**turn** is one `send()` and everything it caused, numbered from 1 across the session; a **step** is one
LLM call inside a turn, numbered from 1 within the turn.

One step: build the working set (history + active pins, within the window) → write its
`context_decision` (and optional `prompt_snapshot`) → call the provider → write the `turn` and
`llm_call` events → run the primitive calls, then the tool calls (results go back in the model's call
order) → next step, until the model answers without tool calls or `max_steps_per_turn` is reached.

Resuming: `state` is a pure codec of the state format (`encode_session` / `decode_session`, and the
pool's); `Runtime.chat(state=...)` (and `AgentPool.add()` for a saved agent) resolves a decoded state
against the runtime (provider, primitives, writer, budget totals), and the new `ChatSession` applies
its history, pins and cursors. A pool's agent is told only that the pool closes the run
(`owns_run=False`); it never holds the pool.

Modules: `runtime` (`Runtime`, resolving a resumed session), `session` (`ChatSession`, its step loop,
`Reply`), `events` (the trace events a session writes), `pool` (`AgentPool`), `state` (the state
format: encode and decode), `common` (shared checks).
"""

from .common import DEFAULT_SYSTEM_PROMPT
from .pool import AgentPool
from .runtime import Runtime
from .session import (
    OUTCOME_ANSWERED,
    OUTCOME_EMPTY,
    OUTCOME_MAX_STEPS,
    OUTCOME_STOPPED,
    ChatSession,
    Reply,
)
from .state import POOL_STATE_FORMAT, STATE_FORMAT, STATE_VERSION

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "OUTCOME_ANSWERED",
    "OUTCOME_EMPTY",
    "OUTCOME_MAX_STEPS",
    "OUTCOME_STOPPED",
    "POOL_STATE_FORMAT",
    "STATE_FORMAT",
    "STATE_VERSION",
    "AgentPool",
    "ChatSession",
    "Reply",
    "Runtime",
]
