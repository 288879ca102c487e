"""The pins pass reads only the steps of agents that have a pin with no token count yet; the counts
it fills are the ones reading every step gives."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from runtime.facts import StepView, TurnView, _pins

AGENTS = st.sampled_from([None, "a"])
PIN_IDS = st.sampled_from(["p1", "p2", "p3", "p4"])
ROW = st.fixed_dictionaries(
    {
        "reason": st.sampled_from(["pinned", "kept", "pinned"]),
        "token_count_after": st.one_of(st.none(), st.integers(0, 50)),
        "token_count_before": st.one_of(st.none(), st.integers(0, 50)),
        "pin_id": st.one_of(PIN_IDS, st.none(), st.just(7)),
    },
    optional={"pinned": st.booleans()},
)
STEP = st.tuples(AGENTS, st.integers(1, 5), st.one_of(st.none(), st.lists(ROW, max_size=4)))
PIN = st.fixed_dictionaries(
    {
        "tokens": st.one_of(st.none(), st.none(), st.integers(1, 30)),
        "created_turn": st.integers(1, 4),
        "until_turn": st.one_of(st.none(), st.integers(1, 5)),
        "unpinned_turn": st.one_of(st.none(), st.integers(1, 5)),
        "producer": st.sampled_from([_pins.PRODUCER, _pins.ARCANA_PRODUCER]),
    }
)


class _EveryAgent(dict[Any, int]):
    """Says every agent still has a pin with no count: the pass then reads every step."""

    def get(self, key: Any, default: Any = None) -> int:
        return 1

    def __missing__(self, key: Any) -> int:
        return 1

    def __bool__(self) -> bool:
        return True


def _turns(steps: list[tuple[str | None, int, list[dict[str, Any]] | None]]) -> list[TurnView]:
    out = []
    for agent, turn, rows in steps:
        sv = StepView(agent=agent, turn=turn, step=1)
        if rows is not None:
            sv.context_decision = SimpleNamespace(metadata={"context_decision": {"decisions": rows}})  # type: ignore[assignment]
        out.append(TurnView(agent=agent, turn=turn, steps=[sv]))
    return out


_NO_COUNT = {
    "tokens": None,
    "created_turn": 1,
    "until_turn": None,
    "unpinned_turn": None,
    "producer": _pins.PRODUCER,
}


def _named(pin_id: str, tokens: int) -> dict[str, Any]:
    return {"reason": "pinned", "token_count_after": tokens, "token_count_before": None, "pin_id": pin_id}


@settings(max_examples=400, deadline=None)
# Two pins of one agent with no count, filled by two steps in turn.
@example(
    steps=[("a", 2, [_named("p1", 5)]), ("a", 3, [_named("p2", 6)])],
    pins={("a", "p1"): _NO_COUNT, ("a", "p2"): _NO_COUNT},
)
@given(
    steps=st.lists(STEP, max_size=8),
    pins=st.dictionaries(st.tuples(AGENTS, PIN_IDS), PIN, max_size=5),
)
def test_pin_tokens_equal_reading_every_step(
    steps: list[tuple[str | None, int, list[dict[str, Any]] | None]],
    pins: dict[tuple[str | None, str], dict[str, Any]],
) -> None:
    found = {key: {**p, "pin_id": key[1], "agent": key[0]} for key, p in pins.items()}
    expected = copy.deepcopy(found)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_pins, "_missing_tokens", lambda found: _EveryAgent())
        _pins._fill_pin_tokens(_turns(steps), expected)
    _pins._fill_pin_tokens(_turns(steps), found)
    assert found == expected
