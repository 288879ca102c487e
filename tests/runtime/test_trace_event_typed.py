"""`TraceEvent.from_typed`: for values whose types a decoder checked, the event `from_dict` reads, or
None where `from_dict` refuses them (so the caller runs `from_dict` for its error)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._trace import ENVELOPE_KEYS, TraceEvent
from runtime.errors import TraceFormatError

STRINGS = st.one_of(
    st.none(),
    st.sampled_from(["r1", "", "a/b", "x\x00", "é\x85", "x" * 200, "x" * 201, "2026-11-30T00:00:00Z"]),
    st.text(max_size=8),
)
TIMESTAMPS = st.one_of(
    st.none(),
    st.sampled_from(["2026-11-30T00:00:00Z", "2026-11-30T00:00:00", "2026-11-30 00:00:00.5-00:16", "", "x"]),
    st.text(max_size=12),
)
OBJECTS = st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
TYPED = st.fixed_dictionaries(
    {
        **{k: STRINGS for k in ENVELOPE_KEYS if k not in ("timestamp", "llm_latency_ms", "tool_call", "budgets", "metadata")},
        "timestamp": TIMESTAMPS,
        "llm_latency_ms": st.one_of(st.none(), st.integers(-5, 2**40), st.floats(-1e12, 1e12)),
        "tool_call": OBJECTS,
        "budgets": OBJECTS,
        "metadata": OBJECTS,
    }
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(values=TYPED, absent=st.sets(st.sampled_from(ENVELOPE_KEYS)))
def test_from_typed_reads_what_from_dict_reads(values: dict[str, Any], absent: set[str]) -> None:
    # A decoder fills an absent key with None; `from_dict` reads the object without it.
    data = {k: v for k, v in values.items() if k not in absent}
    typed = TraceEvent.from_typed({**values, **dict.fromkeys(absent)})
    try:
        expected = TraceEvent.from_dict(data)
    except TraceFormatError:
        assert typed is None
        return
    assert typed is not None
    assert typed == expected
    assert typed.timestamp_dt == expected.timestamp_dt
    assert (typed.metadata, typed.extra, typed.role) == (expected.metadata, {}, expected.role)


def test_from_typed_takes_an_ordinary_event() -> None:
    values = dict.fromkeys(ENVELOPE_KEYS)
    values.update(
        run_id="r", step_id="s", event_type="turn", timestamp="2026-11-30T00:00:00Z", llm_latency_ms=12.9
    )
    event = TraceEvent.from_typed(values)
    assert event is not None and event.llm_latency_ms == 12 and event.metadata == {} and event.role is None
