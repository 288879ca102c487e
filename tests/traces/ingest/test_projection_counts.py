"""A context decision's counts and message rows, as the projection works them out, equal the
reading every other part of the product uses (`runtime.facts.decision_counts`, `message_decision`)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.ingest import conversation_run
from runtime.facts import decision_counts
from traces.ingest.projection import _decision_counts, message_decision, message_decisions

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=300),
    st.floats(allow_nan=False, min_value=-2, max_value=2),
    st.sampled_from([3.0, 2.5, "7", "kept", "compressed", "dropped", "summarized", "pinned", "KEPT", ""]),
)
DECISION = st.fixed_dictionaries(
    {},
    optional={
        "index": VALUES,
        "role": VALUES,
        "outcome": st.one_of(VALUES, st.sampled_from(["kept", "compressed", "dropped", "summarized"])),
        "fidelity": VALUES,
        "relevance_score": VALUES,
        "token_count_before": VALUES,
        "token_count_after": VALUES,
        "reason": st.one_of(VALUES, st.just("pinned")),
        "pinned": VALUES,
        "pin_id": VALUES,
    },
)
DECISIONS = st.one_of(st.lists(st.one_of(DECISION, VALUES), max_size=12), VALUES)


@settings(max_examples=300, deadline=None)
@given(decisions=DECISIONS, cc=VALUES, md_cc=VALUES, listed=st.booleans())
def test_counts_from_rows_equal_decision_counts(decisions: Any, cc: Any, md_cc: Any, listed: bool) -> None:
    d: dict[str, Any] = {"decisions": decisions}
    if listed:
        d["compressed_count"] = cc
    md = {"compressed_count": md_cc, "context_decision": d}
    rows = message_decisions(decisions)
    assert _decision_counts(rows, d, md) == decision_counts(d, md)


@settings(max_examples=300, deadline=None)
@given(decisions=DECISIONS)
def test_message_decisions_equal_the_one_by_one_reading(decisions: Any) -> None:
    expected = (
        [message_decision(x) for x in decisions if isinstance(x, dict)] if isinstance(decisions, list) else []
    )
    assert repr(message_decisions(decisions)) == repr(expected)


def test_counts_of_the_benchmark_conversations() -> None:
    events, _ = conversation_run(random.Random(3), 5)
    for ev in events:
        if ev["event_type"] == "context_decision":
            md = ev["metadata"]
            d = md["context_decision"]
            counts = _decision_counts(message_decisions(d["decisions"]), d, md)
            assert counts == decision_counts(d, md)
            assert counts.kept + counts.compressed + counts.dropped == len(d["decisions"])
