"""`AgentPool`: named agents sharing one run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._config import normalize_primitives
from .._tools import build_tools
from ..errors import ConfigError
from .common import DEFAULT_SYSTEM_PROMPT, check_run_id, check_tool_names, close_run
from .session import ChatSession
from .state import PoolState, decode_pool, decode_session, encode_pool

if TYPE_CHECKING:
    from .runtime import Runtime


class AgentPool:
    """Named agents sharing one run (one `run_id`, one trace file). Each agent is a `ChatSession` with
    its own history, turns, pins and recall log; every event it writes carries
    `metadata.source_agent = name` (tool calls included).

    Primitives per agent: `pool.add(..., cognitive_primitives=[...])` if given (`[]` opts out), else
    the pool default from `collaborate(cognitive_primitives=...)`, else the config's."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        cognitive_primitives: Sequence[str] | None = None,
        state: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> None:
        self.runtime = runtime
        saved = decode_pool(state) if state is not None else None
        if cognitive_primitives is None and saved is not None:
            # A resumed pool keeps the default it was created with unless told otherwise.
            cognitive_primitives = saved.default_primitives
        self.default_primitives: tuple[str, ...] | None = (
            None if cognitive_primitives is None else normalize_primitives(cognitive_primitives)
        )
        # Each saved agent's encoded state, decoded when `add()` resumes that agent.
        self._saved: dict[str, Any] = saved.agents if saved is not None else {}
        self.run_id: str = saved.run_id if saved is not None else check_run_id(run_id)
        self.writer = runtime._writer(self.run_id)
        if saved is not None:
            self.writer.budgets.restore(saved.budgets)
        self.agents: dict[str, ChatSession] = {}

    def add(
        self,
        name: str,
        *,
        system: str | None = None,
        tools: Sequence[Any] | None = None,
        provider: str | None = None,
        model: str | None = None,
        cognitive_primitives: Sequence[str] | None = None,
    ) -> ChatSession:
        """Add agent `name` (its session). Duplicate names and tools named like one of the agent's
        enabled primitives raise `ConfigError`. `tools=None` gives the runtime's tools. In a pool
        resumed from `export_state()`, an agent of that state resumes with its own primitives unless
        `cognitive_primitives` is given."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("pool agent names must be non-empty strings")
        if name in self.agents:
            raise ConfigError(f"the pool already has an agent named {name!r}")
        saved = self._saved.get(name)
        primitives: Sequence[str]
        if cognitive_primitives is not None:
            primitives = normalize_primitives(cognitive_primitives, where=f"pool.add({name!r})")
        elif saved is not None:
            # A resumed agent keeps its own primitives (its pins may need `unpin`).
            primitives = normalize_primitives(saved.get("cognitive_primitives"))
        elif self.default_primitives is not None:
            primitives = self.default_primitives
        else:
            primitives = self.runtime.config.cognitive_primitives
        tool_map = self.runtime.tools if tools is None else build_tools(tools)
        check_tool_names(tool_map, primitives, f"pool.add({name!r})")
        writer = self.writer.for_agent(name)
        if saved is not None:
            agent = self.runtime._resume(
                decode_session(saved),
                system=system,
                provider=provider,
                model=model,
                cognitive_primitives=primitives,
                tools=tool_map,
                pool_writer=writer,
                agent=name,
            )
        else:
            agent = ChatSession(
                self.runtime,
                system=DEFAULT_SYSTEM_PROMPT if system is None else system,
                provider=self.runtime._provider_name(provider),
                model=model,
                tools=tool_map,
                primitives=primitives,
                writer=writer,
                agent=name,
                owns_run=False,
            )
        self.agents[name] = agent
        return agent

    def __getitem__(self, name: str) -> ChatSession:
        return self.agents[name]

    def export_state(self, *, include_history: bool = True) -> dict[str, Any]:
        """Every agent's state plus the pool's run id and budget totals (JSON-safe)."""
        return encode_pool(
            PoolState(
                run_id=self.run_id,
                budgets=self.writer.budgets.to_dict(),
                default_primitives=None if self.default_primitives is None else list(self.default_primitives),
                agents={n: a.export_state(include_history=include_history) for n, a in self.agents.items()},
            )
        )

    async def aclose(self) -> None:
        for agent in self.agents.values():
            await agent.aclose()
        close_run(self.runtime.sink, self.run_id)

    async def __aenter__(self) -> AgentPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
